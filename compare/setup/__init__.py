"""`cnncompare setup gpu`: a framework's own environment built, recorded and found again.
config.py holds cnncompare's configuration and which interpreter each framework runs in;
plan.py decides from the facts what a set-up has to do; build.py builds it aside and
switches it in."""
