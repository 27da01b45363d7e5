"""`python -m serving.launcher`: the command users and launch.sh type (README); its code is the launch wing's
(serving.launch.cli)."""

if __name__ == "__main__":
    import sys

    from serving.launch.cli import main

    sys.exit(main())
