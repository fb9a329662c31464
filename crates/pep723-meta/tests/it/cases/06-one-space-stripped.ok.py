# /// script
# [tool.demo]
#   a = 1
# 	b = "x"
# ///
