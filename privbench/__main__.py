"""Entry point of ``python -m privbench``."""
from privbench.cli import main

if __name__ == "__main__":
    main()
