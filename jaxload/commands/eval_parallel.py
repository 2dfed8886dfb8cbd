"""`jaxload eval-parallel`: the command's home is jaxload.tools.eval.launcher."""

from jaxload.tools.eval.launcher import HELP, NAME, add_arguments, run

__all__ = ["HELP", "NAME", "add_arguments", "run"]
