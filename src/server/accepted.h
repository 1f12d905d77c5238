// The socket of the connection that httplib accepted last on this thread.
//
// httplib (0.11, Debian's) hands each connection to its task queue as a
// closure that hides the socket, and gives handlers no way to reach it. The
// server needs it twice: to see a client leave while its request waits or
// runs without writing (httplib 0.11 cannot), and to cut a connection that
// dribbles its request (slowloris), which httplib's per-read timeout never
// does. accepted.cpp defines accept(2) for the process: the httplib library
// binds to it before libc's, as it would to an LD_PRELOAD, and it records the
// socket for the task queue, which runs on the thread that accepted it. It
// defines listen(2) likewise, for a backlog that takes a burst of clients.
#pragma once

namespace reclaim::server {

// The socket accept() returned last on this thread, once; -1 when none.
int take_accepted_socket();

}  // namespace reclaim::server
