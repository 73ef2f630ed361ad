"""Real elastic execution on Ray (issue 12): the same policies as `gpuwise simulate` move real
PyTorch data-parallel training between long-lived Ray worker actors, one per GPU slot."""
