/* exports.c - preprocessed (not compiled) into the shim's linker version script:
 * every name in shim.def is global, everything else is local. */
{
global:
#define FT_RT_FWD(ret, name, params, args) name;
#define FT_RT(ret, name, params, args, hook) name;
#define FT_DRV(ret, name, base, ptsz, params, args, hook) name;
#define FT_CUPTI(name, params, args) name;
#define FT_API(name) name;
#include "shim/shim.def"
local: *;
};
