"""Versions of the host libraries this integration supports and is tested with.

Same convention as opentelemetry-python-contrib's ``package.py``: ``_instruments`` lists the
requirement specifiers of the instrumented library; ``_tested_with`` the exact versions the
test suite last ran against (on 127.0.0.1, real uvicorn).
"""

_instruments = ("starlette >= 0.37", "fastapi >= 0.110")
_supports_asgi = "3.0"  # any ASGI 3 server/app: the middleware itself imports nothing from them
_tested_with = {
    "fastapi": "0.165.0",
    "starlette": "1.10.0",
    "uvicorn": "0.54.0",
    "httpx": "0.28.1",
    "asgi-correlation-id": "5.0.1",
    "opentelemetry-instrumentation-fastapi": "0.66b2",
}
