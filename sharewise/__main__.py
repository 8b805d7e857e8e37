"""Entry point for ``python -m sharewise``."""

from sharewise.cli import main

if __name__ == "__main__":
    main()
