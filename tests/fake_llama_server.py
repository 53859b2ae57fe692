"""A stand-in for llama-cpp-python's server that dies: started as ``python fake_llama_server.py
--port N [--die-after K] [--signal SIGSEGV]``, it answers ``GET /v1/models`` and K chat
completions (like the extractive reference agent), then kills itself with the signal on the next
completion request, before answering: a runtime whose CPU kernels crash on a real prompt.
``--die-after -1`` never dies."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from layerlab.models.agents import reply_for


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--die-after", type=int, default=0)
    ap.add_argument("--signal", default="SIGSEGV")
    args, _ = ap.parse_known_args()
    lock = threading.Lock()
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            self._send({"object": "list", "data": [{"id": "fake", "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            with lock:
                if 0 <= args.die_after <= served[0]:
                    print(f"fake llama server: dying by {args.signal}", flush=True)
                    # to this thread, not the process: kill(getpid()) is delivered to the main
                    # thread, and this one could send its reply before the process ended (a run
                    # whose last call that was then completed: CI saw it once)
                    signal.pthread_kill(threading.get_ident(), signal.Signals[args.signal])
                    os.kill(os.getpid(), signal.Signals[args.signal])
                    threading.Event().wait()  # never answer, whatever the signal did
                served[0] += 1
            content = reply_for("layerlab/extractive", req["messages"])
            self._send(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 0,
                    "model": req.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": {"prompt_tokens": 600, "completion_tokens": 30, "total_tokens": 630},
                }
            )

    print("fake llama server: up", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
