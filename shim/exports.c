/* exports.c - preprocessed (not compiled) into the shim's linker version script:
 * every name in shim.def is global, everything else is local. */
{
global:
#define FT_CUDART(ret, name, params, args) name;
#define FT_API(name) name;
#include "shim/shim.def"
local: *;
};
