"""Stage 3, worker: the processes that run models. parent.py starts and drives one; child.py is
the only place candidate code is ever imported; protocol.py is the wire between them."""
