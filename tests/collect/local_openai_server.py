"""A small real OpenAI-compatible HTTP server around a tiny local Qwen3-VL's ``generate``, for tests.

``transformers serve`` cannot load a Qwen3-VL processor here (its video processor needs torchvision), so the tests
start this one instead: ``POST /v1/chat/completions`` with text and base64 ``image_url`` parts, the checkpoint's
chat template, greedy ``generate``, OpenAI's JSON reply with token usage. ``faults`` makes it misbehave on purpose:
``{"status_500": k}`` answers the next k requests with HTTP 500, ``{"hang_s": s, "hangs": k}`` stalls the next k
requests for s seconds before answering.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class LocalChatServer:
    def __init__(self, checkpoint: str | Path):
        from rmsweb_kedro.modeling import load_model

        self.model, self.processor = load_model({"path": str(checkpoint)})
        self.model.eval()
        self.model_name = str(checkpoint)
        self.faults: dict[str, float] = {}
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _fault(self) -> tuple[int | None, float]:
        with self._lock:
            if self.faults.get("status_500", 0) > 0:
                self.faults["status_500"] -= 1
                return 500, 0.0
            if self.faults.get("hangs", 0) > 0:
                self.faults["hangs"] -= 1
                return None, float(self.faults.get("hang_s", 5.0))
        return None, 0.0

    def complete(self, body: dict) -> dict:
        import torch
        from PIL import Image

        messages, images = [], []
        for message in body["messages"]:
            content = message["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            parts = []
            for part in content:
                if part["type"] == "image_url":
                    data = part["image_url"]["url"].split(",", 1)[1]
                    images.append(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
                    parts.append({"type": "image"})
                else:
                    parts.append({"type": "text", "text": part["text"]})
            messages.append({"role": message["role"], "content": parts})
        prompt = self.processor.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        inputs = self.processor(text=[prompt], images=images or None, return_tensors="pt")
        with torch.no_grad():
            output = self.model.generate(
                **inputs, max_new_tokens=int(body.get("max_tokens") or 16), do_sample=False
            )
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        text = self.processor.tokenizer.decode(new_tokens, skip_special_tokens=True)
        prompt_tokens, completion_tokens = int(inputs["input_ids"].shape[1]), int(new_tokens.shape[0])
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def __enter__(self) -> LocalChatServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner._lock:
                    owner.requests.append(body)
                status, hang = owner._fault()
                if hang:  # the client has given up by now: answer nothing, generate nothing
                    time.sleep(hang)
                    return
                if status == 500:
                    self._send(500, {"error": {"message": "injected server error", "type": "server_error"}})
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with owner._lock:  # one generate at a time: the tiny model is not shared across threads
                    reply = owner.complete(body)
                self._send(200, reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
