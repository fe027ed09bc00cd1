"""An OpenAI-compatible chat endpoint that answers from a script and records every prompt.

For checks of what kgqr *sends* an LLM (which evidence reached a prompt), not of what a
model makes of it: a real model cannot report its prompts. Answers are streamed as the
OpenAI API streams them, since kgqr's client always streams.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Script = Callable[[str], str]  # prompt -> the answer text


@contextmanager
def recording_llm(script: Script) -> Iterator[tuple[str, list[str]]]:
    """A server on a free loopback port for the block; yields (base URL, prompts seen)."""
    prompts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            return

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            prompt = "\n".join(m["content"] for m in request["messages"])
            prompts.append(prompt)
            answer = script(prompt)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            pieces: tuple[tuple[dict[str, str], str | None], ...] = (
                ({"role": "assistant", "content": answer}, None),
                ({}, "stop"),
            )
            for index in range(int(request.get("n", 1))):
                for delta, finish in pieces:
                    chunk = {
                        "id": "stand-in",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": request["model"],
                        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", prompts
    finally:
        server.shutdown()
        server.server_close()
