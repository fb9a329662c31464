# /// script
# dependencies = ["rich"]
# ///

import rich

# /// script
# oops
