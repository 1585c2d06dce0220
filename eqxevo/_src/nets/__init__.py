"""Networks behind one policy protocol (`AbstractPolicy`)."""
