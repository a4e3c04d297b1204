"""A minimal LSP client for the `eairc lsp` tests: the real server, started as
`python -m eairdsl.cli lsp`, spoken to over its real protocol (JSON-RPC with
Content-Length framing on stdio).

The timeouts are hang guards only: a server that stops answering fails the test
instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
D1 = ROOT / "worlds" / "d1.eair"
GUARD = 120.0  # seconds; only against a hung server


class Client:
    """A minimal LSP client: sends requests and notifications, collects what comes back."""

    def __init__(self, cwd: Path, stderr: IO[bytes]) -> None:
        env = {**os.environ, "LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eairdsl.cli", "lsp"], cwd=cwd, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.next_id = 0
        self.stderr_path: Path | None = None
        self.kept: list[dict[str, Any]] = []  # messages read while waiting for another
        self.capabilities: dict[str, Any] = {}
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        """Split the server's stdout into messages by their Content-Length headers."""
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    self.inbox.put(None)
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            self.inbox.put(json.loads(stream.read(length)))

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self.send({"method": method, **({"params": params} if params is not None else {})})

    def receive(self) -> dict[str, Any]:
        message = self.inbox.get(timeout=GUARD)
        assert message is not None, "the server closed its output"
        return message

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and wait for its response (notifications meanwhile are kept)."""
        self.next_id += 1
        ident = self.next_id
        self.send({"id": ident, "method": method,
                   **({"params": params} if params is not None else {})})
        while True:
            message = self.receive()
            if message.get("id") == ident and "method" not in message:
                assert "error" not in message, message
                return message.get("result")
            self.kept.append(message)

    def diagnostics(self, uri: str) -> list[dict[str, Any]]:
        """Wait for the next publishDiagnostics for `uri`; its diagnostics."""
        return list(self.diagnostics_message(uri)["diagnostics"])

    def _kept_diagnostics(self, uri: str) -> dict[str, Any] | None:
        for at, message in enumerate(self.kept):
            if (message.get("method") == "textDocument/publishDiagnostics"
                    and message["params"]["uri"] == uri):
                del self.kept[at]
                return dict(message["params"])
        return None

    def diagnostics_message(self, uri: str) -> dict[str, Any]:
        """Wait for the next publishDiagnostics for `uri`; its params (with `version`)."""
        while True:
            found = self._kept_diagnostics(uri)
            if found is not None:
                return found
            self.kept.append(self.receive())

    def server_request(self, method: str) -> dict[str, Any]:
        """Wait for the server's next request of `method` and answer it with null."""
        while True:
            for at, message in enumerate(self.kept):
                if message.get("method") == method and "id" in message:
                    del self.kept[at]
                    self.send({"id": message["id"], "result": None})
                    return message
            self.kept.append(self.receive())

    def poll_diagnostics(self, uri: str, wait: float) -> dict[str, Any] | None:
        """The next publishDiagnostics for `uri` if one comes within `wait` seconds."""
        found = self._kept_diagnostics(uri)
        if found is not None:
            return found
        try:
            message = self.inbox.get(timeout=wait)
        except queue.Empty:
            return None
        assert message is not None, "the server closed its output"
        self.kept.append(message)
        return self._kept_diagnostics(uri)

    def open(self, path: Path, text: str) -> str:
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "eair", "version": 1, "text": text}})
        return uri

    def close(self) -> int:
        """shutdown, exit; the server's exit code."""
        assert self.request("shutdown") is None
        self.notify("exit")
        return self.proc.wait(timeout=GUARD)


def started(tmp_path: Path, options: dict[str, Any] | None = None,
            capabilities: dict[str, Any] | None = None) -> Iterator[Client]:
    """A server started and initialized (diagnostics without debounce unless `options`
    say otherwise), shut down or killed afterwards."""
    stderr = (tmp_path / "stderr").open("wb")
    c = Client(ROOT, stderr)
    c.stderr_path = tmp_path / "stderr"
    result = c.request("initialize", {"processId": os.getpid(), "rootUri": ROOT.as_uri(),
                                      "capabilities": capabilities or {},
                                      "initializationOptions": options or {"diagnosticsDelay": 0}})
    caps = c.capabilities = result["capabilities"]
    assert caps["documentFormattingProvider"] and caps["hoverProvider"]
    assert caps["documentSymbolProvider"] and caps["definitionProvider"]
    assert caps["referencesProvider"] and caps["completionProvider"]["triggerCharacters"] == ["."]
    assert caps["semanticTokensProvider"]["full"] and caps["codeActionProvider"]
    c.notify("initialized", {})
    yield c
    if c.proc.poll() is None:
        c.proc.kill()
        c.proc.wait(timeout=GUARD)
    stderr.close()

