# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem recommend`: which mode, and how much faster, for one command.

Runs the user's command under every mode that makes sense at their fast
budget (session.recommend), interleaved and repeated as the time allows,
and answers with the best mode, its speed against dram and swap with
bootstrap intervals, the command line to use and why (decide.Answer).
"""

from hetmem.recommend.session import NoAnswer, Options, Result, as_dict, recommend

__all__ = ["NoAnswer", "Options", "Result", "as_dict", "recommend"]
