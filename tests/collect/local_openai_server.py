"""The one test server: a real OpenAI-compatible HTTP server on 127.0.0.1, around a tiny local Qwen3-VL's
``generate`` (or scripted replies), answering the way vLLM does.

vLLM and SGLang need a GPU and ``transformers serve`` cannot load a Qwen3-VL processor here (its video processor
needs torchvision), so the tests start this stand-in, which speaks the same protocol: ``POST /v1/chat/completions``
with text and base64 ``image_url`` parts, the checkpoint's chat template, and vLLM's response shape:

- ``temperature: 0`` is greedy (absent: 1, OpenAI's default); otherwise temperature + ``top_p`` sampling (no top-k),
  reproducible with the request's ``seed``;
- ``n`` choices per request, ``usage.completion_tokens`` summed over them (as vLLM counts);
- ``logprobs: true`` (+ ``top_logprobs: k``) gives each choice ``logprobs.content``: one
  ``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}`` per completion token, log-probabilities of
  the model's own distribution (vLLM's default ``raw_logprobs``: before temperature and top-p), the end-of-turn
  token included;
- ``finish_reason`` is ``stop`` at the end-of-turn token, else ``length``.

Without a checkpoint (or before the model) it answers from ``replies`` (a queue of reply texts or HTTP statuses)
or ``respond(body)``, with fixed usage (100 prompt, 20 completion tokens), so a judge's or a parser's real HTTP
exchange is tested with exactly the text wanted. ``faults`` makes it misbehave on purpose: ``{"status_500": k}``
answers the next k requests with HTTP 500, ``{"hang_s": s, "hangs": k}`` stalls the next k requests for s seconds
before answering. Every request body is kept in ``requests``.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Usage reported for a scripted reply.
SCRIPTED_USAGE = {"prompt_tokens": 100, "completion_tokens": 20}


class LocalChatServer:
    def __init__(self, checkpoint: str | Path | None = None):
        self.model = self.processor = None
        if checkpoint is not None:
            from rmsweb_kedro.models.modeling import load_model

            self.model, self.processor = load_model({"path": str(checkpoint)})
            self.model.eval()
        self.model_name = str(checkpoint) if checkpoint is not None else "scripted"
        self.replies: list[str | int] = []
        self.respond: Callable[[dict], str | int] | None = None
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

    def _scripted(self, body: dict) -> str | int | None:
        """The queued or ``respond`` reply (text or HTTP status) for this request; None: let the model answer."""
        with self._lock:
            if self.replies:
                return self.replies.pop(0)
        if self.respond is not None:
            return self.respond(body)
        return None if self.model is not None else 500

    def _conversation(self, body: dict) -> tuple[list[dict], list]:
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
        return messages, images

    def _token_entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        token = self.processor.tokenizer.decode([token_id])
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    def complete(self, body: dict) -> dict:
        """The model's chat completion of ``body`` (see the module docstring for what is honoured)."""
        import torch

        tokenizer = self.processor.tokenizer
        messages, images = self._conversation(body)
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = self.processor(text=[prompt], images=images or None, return_tensors="pt")
        n = int(body.get("n") or 1)
        temperature = float(body.get("temperature", 1.0))  # OpenAI's default
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {
                "do_sample": True,
                "temperature": temperature,
                "top_p": float(body.get("top_p") or 1.0),
            }
            sampling["top_k"] = 0
        seeded = body.get("seed") is not None
        with torch.random.fork_rng() if seeded else contextlib.nullcontext(), torch.no_grad():
            if seeded:
                torch.manual_seed(int(body["seed"]))
            out = self.model.generate(
                **inputs,
                **sampling,
                max_new_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 16),
                num_return_sequences=n,
                return_dict_in_generate=True,
                output_logits=bool(body.get("logprobs")),
                pad_token_id=tokenizer.pad_token_id,
            )
        eos = self.model.generation_config.eos_token_id
        stops = {*(eos if isinstance(eos, list) else [eos]), tokenizer.pad_token_id}
        prompt_length = inputs["input_ids"].shape[1]
        per_token = torch.stack(out.logits, dim=1).float().log_softmax(-1) if body.get("logprobs") else None
        top_k = int(body.get("top_logprobs") or 0)
        choices, completion_tokens = [], 0
        for index in range(n):
            ids = out.sequences[index, prompt_length:].tolist()
            end = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))  # the stop token counts
            completion_tokens += end
            choice: dict[str, Any] = {
                "index": index,
                "message": {
                    "role": "assistant",
                    "content": tokenizer.decode(ids[:end], skip_special_tokens=True),
                },
                "logprobs": None,
                "finish_reason": "stop" if ids[end - 1] in stops else "length",
            }
            if per_token is not None:
                content = []
                for position, token_id in enumerate(ids[:end]):
                    row = per_token[index, position]
                    entry = self._token_entry(token_id, float(row[token_id]))
                    best = row.topk(top_k) if top_k else None
                    entry["top_logprobs"] = (
                        [self._token_entry(int(i), float(v)) for v, i in zip(*best, strict=True)]
                        if best
                        else []
                    )
                    content.append(entry)
                choice["logprobs"] = {"content": content}
            choices.append(choice)
        return _response(self.model_name, choices, prompt_length, completion_tokens, len(self.requests))

    def __enter__(self) -> LocalChatServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def _send(self, status: int, payload: dict | None) -> None:
                self.send_response(status)
                if payload is None:
                    self.end_headers()
                    return
                data = json.dumps(payload).encode()  # ASCII: lone surrogates travel as \udcff escapes
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
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
                scripted = owner._scripted(body)
                if isinstance(scripted, int):
                    self._send(scripted, None)
                    return
                if scripted is not None:
                    choices = [
                        {"index": i, "message": {"role": "assistant", "content": scripted}, "logprobs": None,
                         "finish_reason": "stop"}
                        for i in range(int(body.get("n") or 1))
                    ]  # fmt: skip
                    usage = SCRIPTED_USAGE["prompt_tokens"], SCRIPTED_USAGE["completion_tokens"]
                    self._send(200, _response(body.get("model", ""), choices, *usage, len(owner.requests)))
                    return
                with owner._lock:  # one generate at a time: the tiny model is not shared across threads
                    reply = owner.complete(body)
                self._send(200, reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _response(
    model: str, choices: list[dict], prompt_tokens: int, completion_tokens: int, number: int
) -> dict:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
