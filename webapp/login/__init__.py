"""Who is asking: the sign-in page and the server-side session (auth.py), and the login limiter that slows a
password guesser down without locking out the person who knows the password (throttle.py). The users themselves
are data.users'; `python -m webapp.accounts` manages them.
"""
