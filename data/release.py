"""`python -m data.release`: the command users type (README); its code is data.quality.release (a release's card
reports the Quality figures, so it lives in the quality wing)."""

if __name__ == "__main__":
    import sys

    from data.quality.release import main

    sys.exit(main())
