# /// script
# [tool.demo]
# a = "x yz v"
# ///
print("page")
print("two")
