"""What real scripts need keeps working inside the walls: socketpair, AF_UNIX in cwd, pipes,
multiprocessing (srt case 26)."""
import multiprocessing


def square(x):
    return x * x


pair = must_work("socket.socketpair()", socket.socketpair)
if pair:
    pair[0].sendall(b"ping")
    require("socketpair carries data", pair[1].recv(4) == b"ping")
must_work("AF_UNIX listener in cwd", lambda: socket.socket(socket.AF_UNIX).bind("ipc.sock"))
if os.path.exists("ipc.sock"):
    os.remove("ipc.sock")
r, w = os.pipe()
os.write(w, b"x")
require("os.pipe", os.read(r, 1) == b"x")
if __name__ == "__main__":
    result = must_work("multiprocessing.Pool", lambda: multiprocessing.get_context("fork").Pool(2).map(square, range(5)))
    require("pool results", result == [0, 1, 4, 9, 16], repr(result))
done()
