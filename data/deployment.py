"""`python -m data.deployment`: the command users type (README, launch.sh); its code is data.library.deployment."""

if __name__ == "__main__":
    import sys

    from data.library.deployment import main

    sys.exit(main())
