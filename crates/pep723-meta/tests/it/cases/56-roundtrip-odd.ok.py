#!/usr/bin/env python
# /// script
#   dependencies   =   [ "rich" ]   # c
#
# ///
# tail
x=1