"""`python -m data.ingest`: the command users type (README, launch.sh); its code is data.library.ingest."""

if __name__ == "__main__":
    import sys

    from data.library.ingest import main

    sys.exit(main())
