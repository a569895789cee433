"""The development server the tutorial starts, and a browser's visits to it.

The reader's ``manage.py runserver`` serves http://127.0.0.1:8000/ and reloads on
changes. Here it listens on a free port instead (another server may hold 8000 on this
machine), and the tutorial's addresses are rewritten to it; it runs with
``--noreload``, and is stopped with Control-C (``SIGINT``) at the end of the page that
started it, as the tutorial tells the reader to.
"""

from __future__ import annotations

import html
import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.tutorial.pages import LOCAL_SITE, TutorialError

_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class DevelopmentServer:
    def __init__(self, command: str, *, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.address = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                ["bash", "-c", f"exec {command} 127.0.0.1:{self.port} --noreload"],
                cwd=cwd,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_listening()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def local(self, text: str) -> str:
        """``text`` with the tutorial's address of the server replaced by this one's."""
        return text.replace(LOCAL_SITE, self.address)

    def _wait_until_listening(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TutorialError(f"runserver exited at once:\n{self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TutorialError(f"runserver did not listen within {timeout}s:\n{self.log.read_text()}")

    def get(self, url: str) -> tuple[str, str]:
        """GET the tutorial's ``url``; return the address it ended at and the page's text."""
        try:
            with self.opener.open(self.local(url), timeout=30) as response:
                return response.geturl(), html.unescape(response.read().decode())
        except urllib.error.HTTPError as error:
            error.close()
            raise TutorialError(f"GET {url}: {error.code} {error.reason}") from None

    def log_in_to_admin(self, username: str, password: str) -> None:
        login = f"{LOCAL_SITE}/admin/login/?next=/admin/"
        _, page = self.get(login)
        token = _CSRF_INPUT.search(page)
        if token is None:
            raise TutorialError(f"the admin's login page has no CSRF token:\n{page[:2000]}")
        form = urllib.parse.urlencode(
            {
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": token[1],
                "next": "/admin/",
            }
        ).encode()
        with self.opener.open(self.local(login), data=form, timeout=30) as response:
            if urllib.parse.urlsplit(response.geturl()).path != "/admin/":
                raise TutorialError(f"logging in to the admin as {username!r} failed")

    def stop(self) -> int:
        """Control-C, as a reader stops it; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode
