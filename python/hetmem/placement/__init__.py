"""Profile-guided placement: what a run allocated, where each site should go.

profile: the interposer's profile files (read, merge); sitenames: the names
people can tell apart; symbolize: frames to function and source line; advise:
the advisor (cost model, solver) behind `hetmem advise`; fileformat: the
placement file and the compact table the interposer reads; limits: the
advisor's limits that the CLI shows without importing numpy.
"""
