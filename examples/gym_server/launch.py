"""Launch the capture server the wrong way round, to show why the sink must be configured.

This launcher installs a sink in its own process with ``install_token_sink`` and then starts
uvicorn with several workers. uvicorn spawns its workers, so none of them sees that sink:
``GET /health`` answers ``"installed_sink": false`` from every worker, and the only sink a
worker writes through is the one it built itself from ``TOKCAP_GYM_CONFIG``.

    TOKCAP_GYM_CONFIG=config.yaml python examples/gym_server/launch.py --port 8000 --workers 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn

from reference.memory_store import MemoryTokenStore
from tokcap_spec.protocols import install_token_sink, installed_token_sink


def main() -> None:
    """Install a sink here, then serve ``app:app`` with uvicorn workers that cannot see it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()
    install_token_sink(MemoryTokenStore(namespace="launcher"))
    print(f"launcher installed_sink={installed_token_sink() is not None}", flush=True)
    uvicorn.run(
        "app:app",
        app_dir=str(Path(__file__).resolve().parent),
        host=options.host,
        port=options.port,
        workers=options.workers,
        lifespan="on",
        access_log=False,
    )


if __name__ == "__main__":
    main()
