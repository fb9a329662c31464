# /// script
# [tool.demo]
# s = """
#   
# x
# """
# ///
