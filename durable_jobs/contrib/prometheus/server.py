"""The HTTP server of ``runworker --metrics-port``: this process's metrics at ``/metrics``.

A :mod:`wsgiref` server on a daemon thread serving ``prometheus_client``'s WSGI app,
rather than ``prometheus_client.start_http_server``, so that it can be stopped with the
worker (:meth:`MetricsServer.close`) and binds before the worker starts: a port already
in use fails the command at once instead of leaving a worker whose metrics nobody can
scrape.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.registry import Collector

# Importing the counters connects them to durable_jobs' signals, before the worker starts.
from durable_jobs.contrib.prometheus import metrics as counters  # noqa: F401

PATH = "/metrics"


class QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on the worker's stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def server_class(host: str, port: int) -> type[WSGIServer]:
    """A threading WSGI server of the address family ``host`` resolves to (IPv6 too)."""
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True

    return Server


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` until :meth:`close`.

    Binding happens in the constructor, so a taken port raises :class:`OSError` there.
    Port 0 binds a free port; :attr:`port` is the one bound.
    """

    def __init__(self, port: int, host: str = "127.0.0.1", registry: Collector = REGISTRY) -> None:
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO", "").rstrip("/") == PATH:
                return metrics_app(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"Not found: the metrics are at {PATH}\n".encode()]

        self.httpd = make_server(
            host, port, app, server_class=server_class(host, port), handler_class=QuietHandler
        )
        self.host = host
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever,
            name="durable-jobs-metrics",
            daemon=True,  # a worker's forced exit never waits for a scrape
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{PATH}"

    def close(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
