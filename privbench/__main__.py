"""Entry point of ``python -m privbench``."""
from privbench.cli import main

main()
