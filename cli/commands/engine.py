"""``recipe engine``: serve a policy with the local engine (vLLM wire format).

recipe engine serve --model DIR [--served-model-name NAME] [--host 127.0.0.1] [--port 8000] [--max-num-seqs 64]
                    [--compile] [--torch-threads 1]
    loads the policy folder DIR and serves /v1/completions, /v1/chat/completions and the control routes until
    interrupted (trainer.engine.server.serve). Clients name the model NAME (default: DIR as given, like vLLM);
    the served name is printed on start: pass it to `recipe eval run --model`.
"""

from __future__ import annotations

import argparse

from cli.args import port, positive_int


def _engine_serve(args: argparse.Namespace) -> int:
    from trainer.engine import EngineConfig
    from trainer.engine.server import SERVER_TORCH_THREADS, ServeOptions, serve

    slots = {} if args.max_num_seqs is None else {"max_num_seqs": args.max_num_seqs}
    threads = args.torch_threads or SERVER_TORCH_THREADS
    config = EngineConfig(compile=args.compile, torch_threads=threads, **slots)
    serve(args.model, ServeOptions(args.host, args.port, served_model_name=args.served_model_name), config)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    engine = commands.add_parser("engine", help="the local inference engine (vLLM's HTTP API)").add_subparsers(
        dest="engine_command", required=True, help="what to do with the engine"
    )
    serve = engine.add_parser("serve", help="serve a policy folder over HTTP")
    serve.add_argument("--model", required=True, help="policy folder (save_policy or a Qwen3 checkpoint)")
    serve.add_argument("--served-model-name", help="model name clients pass (default: --model as given, like vLLM)")
    serve.add_argument("--host", default="127.0.0.1", help="listen address; loopback serves this machine only")
    serve.add_argument("--port", type=port, default=8000, help="the port to listen on")
    serve.add_argument(
        "--max-num-seqs", type=positive_int, help="requests decoded together (default: the engine's, 64)"
    )
    serve.add_argument(
        "--compile", action="store_true", help="torch.compile the decode step (faster steps after a one-off compile)"
    )
    serve.add_argument(
        "--torch-threads", type=positive_int, help="torch intra-op threads (default 1: a tiny model's ops are small)"
    )
    serve.set_defaults(handler=_engine_serve)
