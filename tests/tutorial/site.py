"""A reader's terminal and editor, following the tutorial's blocks in a directory.

Console commands run in bash, in the directory the tutorial's ``cd`` commands lead to,
and must exit 0 and print what the tutorial shows (see ``console``). A few need more
than a shell to be followed faithfully, and the method that runs each says how:
activating the virtualenv, ``pip install``, ``runserver`` (a server, which does not
exit) and ``createsuperuser`` (whose credentials the visits to the admin use). File
blocks are written as ``files`` says.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.tutorial import environment
from tests.tutorial.console import Command, check_output, commands
from tests.tutorial.environment import CHECKOUT_PLACEHOLDER, Virtualenv
from tests.tutorial.files import write_block
from tests.tutorial.pages import LOCAL_SITE, CodeBlock, LocalLink, TutorialError
from tests.tutorial.server import DevelopmentServer

#: Long enough for pip to build the package or pytest to run the site's tests, and well
#: within the suite's timeout for the whole test.
COMMAND_TIMEOUT = 120
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: What ``source .venv/bin/activate`` leaves behind that describes bash, not the reader.
_SHELL_VARIABLES = ("PWD", "OLDPWD", "SHLVL", "_")


class TutorialSite:
    def __init__(self, directory: Path, checkout: Path) -> None:
        self.directory = directory
        self.cwd = directory / "reader"
        self.cwd.mkdir()
        self.checkout = environment.copy_checkout(
            checkout, directory / "checkout" / "django-durable-jobs"
        )
        self.env = environment.command_environment(directory / "shims")
        self.virtualenv: Virtualenv | None = None
        self.server: DevelopmentServer | None = None
        self.superuser: tuple[str, str] | None = None
        self.logged_in = False
        self.servers_started = 0
        #: Every command run and what it printed, to read when something differs.
        self.transcript = directory / "transcript.txt"

    # -- blocks -------------------------------------------------------------------------

    def run(self, block: CodeBlock) -> None:
        if block.language == "console":
            for command in commands(block):
                self.run_command(command)
        else:
            write_block(self.cwd, block)

    def run_command(self, command: Command) -> None:
        words = shlex.split(command.text)
        if words[0] == "cd" and len(words) == 2:
            self._change_directory(command, words[1])
        elif words[0] in ("source", ".") and len(words) == 2:
            self._activate(command, words[1])
        elif words[:3] == ["python", "manage.py", "runserver"]:
            self._start_server(command, words)
        else:
            text = command.text
            if words[:4] == ["python", "-m", "pip", "install"]:
                text = self._prepare_pip_install(command, words[4:])
            printed = self.shell(self._local_addresses(command, text), where=command.where)
            check_output(command, printed)
            if words[:3] == ["python", "-m", "venv"] and len(words) == 4:
                if self.virtualenv is not None:
                    raise TutorialError(f"{command.where}: a second virtualenv")
                self.virtualenv = Virtualenv(
                    self.cwd / words[3], self.directory / "linked-dependencies"
                )
            if "createsuperuser" in words:
                self.superuser = self._credentials(command, words)

    def visit(self, link: LocalLink) -> str:
        """The page the text sends the reader to, as the tutorial's superuser sees it."""
        if self.server is None:
            raise TutorialError(f"{link.where}: {link.url}, but no development server runs")
        if link.path.startswith("/admin/") and not self.logged_in:
            if self.superuser is None:
                raise TutorialError(f"{link.where}: {link.url} needs the superuser not created")
            self.server.log_in_to_admin(*self.superuser)
            self.logged_in = True
        address, page = self.server.get(link.url)
        if "/login/" in address:
            raise TutorialError(f"{link.where}: {link.url} sent the superuser to log in")
        return page

    def end_page(self) -> None:
        """The reader stops the server the page started."""
        if self.server is not None:
            server, self.server = self.server, None
            status = server.stop()
            if status != 0:
                raise TutorialError(
                    f"runserver exited {status} on Control-C:\n{server.log.read_text()}"
                )

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()

    # -- commands -----------------------------------------------------------------------

    def shell(self, text: str, *, where: str) -> str:
        """Run ``text`` as the reader's shell would; what it printed, both streams in order."""
        try:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text],
                cwd=self.cwd,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                timeout=COMMAND_TIMEOUT,
            )
        except subprocess.TimeoutExpired as expired:
            raise TutorialError(f"{where}: `{text}` ran for over {COMMAND_TIMEOUT}s") from expired
        with self.transcript.open("a") as transcript:
            transcript.write(f"--- {where} (exit {done.returncode})\n$ {text}\n{done.stdout}")
        if done.returncode != 0:
            raise TutorialError(
                f"{where}: `{text}` exited {done.returncode} (every command so far is in "
                f"{self.transcript}):\n{done.stdout}"
            )
        return done.stdout

    def _change_directory(self, command: Command, target: str) -> None:
        directory = (self.cwd / target).resolve()
        if not directory.is_dir():
            raise TutorialError(f"{command.where}: there is no directory {target!r} to cd to")
        self.cwd = directory

    def _activate(self, command: Command, script: str) -> None:
        """Source the activation script in bash, and keep the environment it leaves."""
        dump = subprocess.run(
            ["bash", "-c", 'source "$0" >/dev/null && env -0', script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
        )
        if dump.returncode != 0:
            raise TutorialError(f"{command.where}: `{command.text}` failed:\n{dump.stderr}")
        env = dict(entry.split("=", 1) for entry in dump.stdout.split("\0") if "=" in entry)
        for name in _SHELL_VARIABLES:
            env.pop(name, None)
        if self.virtualenv is None or env.get("VIRTUAL_ENV") != str(self.virtualenv.path):
            raise TutorialError(f"{command.where}: this does not activate the tutorial's venv")
        self.env = env

    def _prepare_pip_install(self, command: Command, arguments: list[str]) -> str:
        """Link what pip would download (see ``environment``); the command to run."""
        # Without the tutorial's virtualenv active, `python` is the interpreter running the
        # tests, and pip would install into its environment.
        if self.virtualenv is None or self.env.get("VIRTUAL_ENV") != str(self.virtualenv.path):
            raise TutorialError(f"{command.where}: pip install outside the tutorial's venv")
        requirements = []
        for argument in arguments:
            if argument.startswith("-"):
                raise TutorialError(f"{command.where}: pip option {argument} is not understood")
            if argument == CHECKOUT_PLACEHOLDER:
                requirements += environment.checkout_requirements(self.checkout)
            elif "/" in argument:
                raise TutorialError(f"{command.where}: {argument} is not the checkout's path")
            else:
                requirements.append(argument)
        self.virtualenv.link(requirements)
        return command.text.replace(CHECKOUT_PLACEHOLDER, str(self.checkout))

    def _start_server(self, command: Command, words: list[str]) -> None:
        if len(words) != 3 or command.output:
            raise TutorialError(f"{command.where}: only a plain runserver, output not shown")
        if self.server is not None:
            raise TutorialError(f"{command.where}: a development server already runs")
        self.servers_started += 1
        log = self.directory / f"runserver-{self.servers_started}.log"
        self.server = DevelopmentServer(command.text, cwd=self.cwd, env=self.env, log=log)
        self.logged_in = False

    def _local_addresses(self, command: Command, text: str) -> str:
        if LOCAL_SITE not in text:
            return text
        if self.server is None:
            raise TutorialError(f"{command.where}: {LOCAL_SITE}, but no development server runs")
        return self.server.local(text)

    def _credentials(self, command: Command, words: list[str]) -> tuple[str, str]:
        """The superuser's name and password, which the reader would type into the admin."""
        settings = dict(word.split("=", 1) for word in words if _ASSIGNMENT.match(word))
        username = next(
            (words[i + 1] for i, word in enumerate(words[:-1]) if word == "--username"), None
        )
        password = settings.get("DJANGO_SUPERUSER_PASSWORD")
        if username is None or password is None or "--noinput" not in words:
            raise TutorialError(
                f"{command.where}: createsuperuser must take --noinput, --username and "
                "DJANGO_SUPERUSER_PASSWORD, or it would wait for answers"
            )
        return username, password
