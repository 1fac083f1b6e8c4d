// A shared library that is no troupe plugin at all.
extern "C" __attribute__((visibility("default"))) int some_function() { return 7; }
