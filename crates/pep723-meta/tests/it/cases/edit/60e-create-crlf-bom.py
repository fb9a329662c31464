"""Doc."""
import os
