// serve_tests is a client. The server under test is its child, `reclaim
// serve`, which ThreadSanitizer watches in full (scripts/test --sanitize
// thread). This process speaks HTTP through Debian's libcpp-httplib, which is
// not built with TSan, so TSan sees only half of that library's
// synchronisation: it reported reads of httplib's shared std::regex as races
// and Client::stop's unlock of a mutex whose lock it never saw. None of that is
// the server's. So the client makes no reports; a crash or a wrong answer
// still fails its test, and TSAN_OPTIONS can turn reports back on.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "report_bugs=0"; }
#endif
