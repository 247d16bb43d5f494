// A plugin for disco.load_library that registers a name the test programs already have
// ("test.echo") beside a new one: loading it must be an ordinary error, not the end of the job.
#include <disco/function.h>

DISCO_REGISTER_GLOBAL("test.plugin.fresh").set_body_typed([]() { return int64_t{7}; });
DISCO_REGISTER_GLOBAL("test.echo").set_body_typed([](int64_t x) { return x; });
