"""A null OpenAI-compatible streaming endpoint: nginx answering every request with a fixed SSE body.

It costs the server almost nothing (~100k req/s on one core), so a load generator pointed at it
measures itself: this is how the client is calibrated and how load generators are compared.
The body looks like vLLM's: ``tokens`` one-word content chunks, a usage chunk, ``[DONE]``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NULL_MODEL = "null-model"


def _chunk(obj: dict) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


def sse_body(tokens: int = 16, prompt_tokens: int = 32, chat: bool = True, continuous_usage: bool = False) -> str:
    """The fixed streamed body: ``tokens`` content chunks, a usage chunk, ``[DONE]``."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    out = []
    for i in range(tokens):
        choice = (
            {"index": 0, "delta": {"content": " word"}, "logprobs": None, "finish_reason": None}
            if chat
            else {"index": 0, "text": " word", "logprobs": None, "finish_reason": None}
        )
        obj = {"id": "null-0", "object": kind, "created": 0, "model": NULL_MODEL, "choices": [choice]}
        if continuous_usage:
            obj["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": i + 1,
                "total_tokens": prompt_tokens + i + 1,
            }
        out.append(_chunk(obj))
    out.append(
        _chunk(
            {
                "id": "null-0",
                "object": kind,
                "created": 0,
                "model": NULL_MODEL,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": tokens,
                    "total_tokens": prompt_tokens + tokens,
                },
            }
        )
    )
    out.append("data: [DONE]\n\n")
    return "".join(out)


def _quote(text: str) -> str:
    if "'" in text or "\\" in text:
        raise ValueError("null endpoint bodies must not contain quotes or backslashes")
    return "'" + text + "'"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class NullServer:
    url: str
    port: int
    pid: int
    workdir: Path
    process: subprocess.Popen

    def stop(self) -> None:
        """Stop nginx (graceful quit, then kill) and remove its directory."""
        if self.process.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "NullServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def nginx_binary() -> str:
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and Path(candidate).exists():
            return candidate
    raise FileNotFoundError(
        "nginx is not installed; install it with `apt-get install -y nginx` (scripts/setup.sh does)"
    )


def start(
    *,
    tokens: int = 16,
    prompt_tokens: int = 32,
    cpu: int | None = None,
    workers: int = 1,
    port: int | None = None,
    continuous_usage: bool = False,
    timeout_s: float = 10.0,
) -> NullServer:
    """Start nginx on 127.0.0.1 (a free port unless given) in a temp directory; return when it answers.

    ``cpu`` pins the workers to that core (the benchmark gives nginx core 0, the client core 1).
    """
    binary = nginx_binary()
    port = port or _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="null-endpoint-"))
    affinity = ""
    if cpu is not None:
        mask = "1" + "0" * cpu
        affinity = f"worker_cpu_affinity {' '.join([mask] * workers)};"
    models = json.dumps({"object": "list", "data": [{"id": NULL_MODEL, "object": "model", "owned_by": "null"}]})
    chat = sse_body(tokens, prompt_tokens, True, continuous_usage)
    completion = sse_body(tokens, prompt_tokens, False, continuous_usage)
    temp = {name: workdir / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    conf = f"""
daemon off;
master_process on;
worker_processes {workers};
{affinity}
worker_rlimit_nofile 20000;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 16384; multi_accept on; }}
http {{
  access_log off;
  client_body_temp_path {temp["body"]};
  proxy_temp_path {temp["proxy"]};
  fastcgi_temp_path {temp["fastcgi"]};
  uwsgi_temp_path {temp["uwsgi"]};
  scgi_temp_path {temp["scgi"]};
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  tcp_nodelay on;
  client_max_body_size 16m;
  client_body_buffer_size 1m;
  server {{
    listen 127.0.0.1:{port} backlog=8192;
    location = /health {{ default_type text/plain; return 200 'ok'; }}
    location = /metrics {{ default_type text/plain; return 200 '# null endpoint\\n'; }}
    location = /v1/models {{ default_type application/json; return 200 {_quote(models)}; }}
    location = /v1/completions {{ default_type text/event-stream; return 200 {_quote(completion)}; }}
    location / {{ default_type text/event-stream; return 200 {_quote(chat)}; }}
  }}
}}
"""
    (workdir / "nginx.conf").write_text(conf)
    log = open(workdir / "stderr.log", "wb")
    process = subprocess.Popen(  # noqa: S603 - argument list
        [binary, "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-e", str(workdir / "error.log")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    server = NullServer(url=f"http://127.0.0.1:{port}", port=port, pid=process.pid, workdir=workdir, process=process)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            text = (
                (workdir / "stderr.log").read_text(errors="replace")
                + (workdir / "error.log").read_text(errors="replace")
                if (workdir / "error.log").exists()
                else ""
            )
            server.stop()
            raise RuntimeError(f"nginx exited with code {process.returncode}: {text[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"nginx did not answer on port {port} within {timeout_s:g}s")
        time.sleep(0.05)
