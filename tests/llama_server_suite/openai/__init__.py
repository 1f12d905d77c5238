"""What llama-server's test files call of the `openai` Python package, which
Debian does not ship: the client, its four create() calls, streamed or not,
and replies read as attributes. Requests go over `requests` as the real
client's would (JSON body, a bearer key); a non-2xx answer raises
APIStatusError with the status and body, as the real one does.
"""
import json

import requests

__all__ = ["OpenAI", "APIError", "APIStatusError"]


class APIError(Exception):
    pass


class APIStatusError(APIError):
    def __init__(self, status_code, body):
        super().__init__(f"Error code: {status_code} - {body}")
        self.status_code = status_code
        self.body = body


class Object:
    """A JSON object read as attributes; missing fields read as None."""

    def __init__(self, fields):
        self._fields = fields

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return wrap(self._fields.get(name))

    def __getitem__(self, name):
        return wrap(self._fields[name])

    def model_dump(self):
        return self._fields

    def __repr__(self):
        return f"Object({self._fields!r})"


class Response(Object):
    @property
    def output_text(self):
        """The SDK's convenience: every output_text part of every message."""
        texts = []
        for item in self._fields.get("output", []):
            if item.get("type") == "message":
                texts += [c.get("text", "") for c in item.get("content", []) if c.get("type") == "output_text"]
        return "".join(texts)


def wrap(value):
    if isinstance(value, dict):
        return Object(value)
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


class _Endpoint:
    def __init__(self, client, path, shape=Object):
        self._client, self._path, self._shape = client, path, shape

    def create(self, **body):
        body = {k: v for k, v in body.items() if v is not None}
        return self._client._post(self._path, body, self._shape)


class _Namespace:
    pass


class OpenAI:
    def __init__(self, api_key=None, base_url="https://api.openai.com/v1", timeout=600, **_):
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.chat = _Namespace()
        self.chat.completions = _Endpoint(self, "/chat/completions")
        self.completions = _Endpoint(self, "/completions")
        self.embeddings = _Endpoint(self, "/embeddings")
        self.responses = _Endpoint(self, "/responses", Response)

    def _post(self, path, body, shape):
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        stream = bool(body.get("stream"))
        r = requests.post(self.base_url + path, json=body, headers=headers, timeout=self.timeout, stream=stream)
        if r.status_code // 100 != 2:
            try:
                raise APIStatusError(r.status_code, r.json())
            except ValueError:
                raise APIStatusError(r.status_code, r.text)
        if not stream:
            return shape(r.json())
        return _events(r)


def _events(r):
    """A server-sent event stream's data lines as objects, up to [DONE]."""
    for line in r.iter_lines(decode_unicode=True):
        if not line or not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if "error" in event and len(event) == 1:
            raise APIError(str(event["error"]))
        if isinstance(event.get("response"), dict):
            yield _ResponseEvent(event)
        else:
            yield Object(event)


class _ResponseEvent(Object):
    @property
    def response(self):
        return Response(self._fields["response"])
