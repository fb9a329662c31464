import sys
# /// script