"""``python -m metaprov`` runs the command-line interface."""

from metaprov.cli import main

if __name__ == "__main__":
    main()
