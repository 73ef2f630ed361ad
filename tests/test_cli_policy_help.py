"""`simulate`/`compare --help` list exactly the policies the registry builds (one list, no hand copy)."""

import argparse
import re

from gpuwise.cli import compare, simulate
from gpuwise.policies.registry import POLICIES


def _policy_help(module) -> str:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    action = next(a for a in parser._actions if "--policy" in a.option_strings)
    return action.help


def test_policy_help_names_every_registered_policy():
    for module in (simulate, compare):
        listed = re.split(r",\s*", _policy_help(module).split(":", 1)[1].strip())
        assert listed == list(POLICIES), module.__name__
