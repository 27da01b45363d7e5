"""`python -m data.release`: the command users type (README); its code is data.release.make."""

if __name__ == "__main__":
    import sys

    from data.release.make import main

    sys.exit(main())
