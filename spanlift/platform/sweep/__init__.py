"""The sweep on Ray: the sweep file, the Tune driver, one trial, the Ray Train worker, the teacher pass."""
