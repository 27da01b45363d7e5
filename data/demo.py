"""`python -m data.demo`: the command users type (README, launch.sh); its code is data.library.demo."""

if __name__ == "__main__":
    import sys

    from data.library.demo import main

    sys.exit(main())
