"""What every command line shares at its edge: the credentials of the runs started here
(runs.py: a `manager` in a fresh shell finds a lab's operator certificate by the address it
dials) and a reader that went away (pipes.py: `storage get URL | head` ends quietly)."""
