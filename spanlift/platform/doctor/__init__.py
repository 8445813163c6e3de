"""`spanlift doctor`: is this machine ready to sweep?

report.py        one check's outcome (pass, FAIL, skip with the reason) and how it prints
environment.py   Ray reachable and its resources, the MLflow store, the storage folder, the
                 files and code a sweep file names
device.py        every solver on every embedded backbone on the device (and in half
                 precision), every learned fit, a DDP fit in a one-process group, FID
                 feature throughput, images/s per NFE
"""
