# SPDX-License-Identifier: BSD-3-Clause
"""One module per `hetmem` verb; each defines a Command class (see hetmem.cli)."""
