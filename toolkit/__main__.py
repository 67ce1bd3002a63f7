"""`python -m toolkit`: the `hrt` command (user trial BO: there was none)."""

from ._entry import main

main()
