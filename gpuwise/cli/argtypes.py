"""argparse value types shared by the commands (registered once on the parser in `gpuwise.cli.main`)."""

from __future__ import annotations

import argparse
import math


def whole_number(text: str) -> int:
    """An integer flag value; float notation of a whole number is accepted (`1e5`, `2.0`).

    The help texts write counts as 1e5, so refusing what they show would be a trap."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a whole number, e.g. 100000 or 1e5") from None
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give e.g. 100000 or 1e5")
    if abs(value) > 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is too large; give a whole number below 9.2e18")
    return int(value)
