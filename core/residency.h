/* residency.h - the residency engine's decisions after the plan: whether a load finds a
 * slot free or which loaded units give their slots up (also to come back within the
 * slots after a call went over them), which units a prefetch loads, which
 * unit's range starts or ends at a pass position, how a call's touch of a streamed unit
 * is judged (a use, a miss to load, or a stale address to leave alone), and what an
 * unload does with the unit's bytes (docs/residency.md explains each rule and why).
 *
 * Owns: the repeat rule's table (ft_res_repeat_t), nothing else. The shim
 * (shim/residency.c, shim/guard.c) builds the inputs from its state under res.lock and
 * carries out the answers: maps, copies, events, counters and messages are its own.
 * No lock, no CUDA: the caller serialises the calls that share a table.
 */
#ifndef FT_RESIDENCY_H
#define FT_RESIDENCY_H

#include <stdint.h>

/* A unit as the slot decisions see it. */
typedef struct {
    uint64_t stamp; /* load order: the larger, the more recently loaded */
    int loaded;     /* its memory is on the device */
    int streamed;   /* it has regions the engine moves; a resident unit has none */
    int pinned;     /* changed too often: stays on the device once loaded, in no slot */
    /* It may not give up its memory now: the unit being loaded, the unit whose launch
     * asked for the prefetch, or one the call being guarded has touched (its launch is
     * not enqueued yet, and would read unmapped memory). */
    int busy;
} ft_res_unit_t;

/* What a load does about the slots. */
typedef enum {
    FT_RES_LOAD,  /* a slot is free */
    FT_RES_EVICT, /* the victim gives its slot up first */
    FT_RES_SKIP,  /* a prefetch, and every slot holds a unit in use: nothing now */
    FT_RES_OVER,  /* a call needs it now and no slot can be freed: over the slots rather
                   * than a fault */
} ft_res_room_t;

/* The loaded unit that gives its slot up: the least recently loaded of the streamed,
 * loaded, unpinned, not busy ones (the lowest index on a tie); -1 when none may. */
int ft_res_victim(const ft_res_unit_t *units, int n);

/* The loaded units that give their slots up so that `want` more units fit in `slots`
 * when `loaded` units hold slots now: want 1 before a load, 0 to come back within the
 * slots after a call went over them (a launch that reads more streamed units than the
 * slots hold has them all loaded, and they would otherwise stay: each later load frees
 * one slot, for itself). loaded + want - slots of them, in ft_res_victim's order (the
 * least recently loaded first, the lowest index on a tie), each one ft_res_victim may
 * name (streamed, loaded, not pinned, not busy) and none of the n_keep units in keep
 * (needed soon: the units a prefetch under way is about to load would only come back).
 * Fewer when fewer may go; none when there is room. Written to out (room for n);
 * returns how many. */
int ft_res_victims(const ft_res_unit_t *units, int n, int loaded, int slots, int want, const int *keep, int n_keep,
                   int *out);

/* Room for one more loaded unit when `loaded` units hold slots of `slots`: FT_RES_LOAD
 * below the count, with no victim. Else the victims of ft_res_victims (want 1: one for
 * the load, and one more for each unit over the slots) in victims[0..*n_victims), and
 * FT_RES_EVICT when as many may go as that. When fewer may go: FT_RES_SKIP for a
 * prefetch, with no victim (a prefetch never goes over the slots), and FT_RES_OVER for
 * a load a call needs, with those that may go (over the slots by the rest rather than a
 * fault). victims has room for n. */
ft_res_room_t ft_res_make_room(const ft_res_unit_t *units, int n, int loaded, int slots, int prefetch,
                               int *victims, int *n_victims);

/* The units a prefetch at unit u's first launch loads, in the order it loads them: the
 * streamed units that follow u in the pass (wrapping round), as many as the other slots
 * hold (slots - 1), whether loaded now or not (a loaded one is kept, and still counts),
 * but for a pinned one on the device (it holds no slot).
 * Written to out (room for n - 1); returns how many. */
int ft_res_prefetch(const ft_res_unit_t *units, int n, int u, int slots, int *out);

/* A unit's range of launch positions in the recorded pass, and the pass's geometry. */
typedef struct {
    uint32_t first, last;
} ft_res_range_t;

typedef struct {
    long len;   /* the recorded pass's launches (<= 0: unknown) */
    long start; /* the recorded position at which followed passes begin */
} ft_res_pass_t;

/* The unit whose range starts (end 0) or ends (end 1) at pass position pos, or -1.
 * ranges are in pass order and do not overlap (a binary search). */
int ft_res_unit_at(const ft_res_range_t *ranges, int n, uint32_t pos, int end);

/* Whether launch count `at` in the lane's pass (-1: unknown) lies more than half a pass
 * from the range, in the order of a pass (positions before pass->start come after the
 * wrap). Such a touch says nothing of where the pass is. */
int ft_res_far(long at, ft_res_range_t range, const ft_res_pass_t *pass);

/* The position a launch is judged by, on a lane that keeps *off_script: tracked is
 * ft_disc_track's position (-1: none), expected whether the launch is the one the
 * record has there (2: a launch whose weight made its position sure). Position 0
 * begins a pass on the record again, and a position made sure puts the lane back on it;
 * a launch off the record takes the lane off it until then, and is then judged by no
 * position (-1). */
long ft_res_lane_pos(int *off_script, long tracked, int expected);

/* The repeat rule. Weights are grouped into units so that each is read in one range of
 * the pass: a kernel that keeps touching the same streamed weight every few launches
 * carries a stale address (PyTorch's cat kernels that discovery never saw, in the
 * prefill, held one weight's address in an unused metadata slot in every layer). The
 * third touch in a row, each within a quarter of a pass (at least 4 launches) of the
 * one before on the same lane, and those after it are stale; two reads half a pass
 * apart (a layer reading a far layer's weight) are not. The table keeps each (kernel,
 * region)'s last touch and run; start it NULL. */
typedef struct ft_res_repeat ft_res_repeat_t;

/* Records the touch of region by kernel (0: a copy or a set, which the rule spares and
 * does not record) at lane's launch count `at`; 1 when it is stale by the rule. Out of
 * memory, the touch is not stale. */
int ft_res_repeat_touch(ft_res_repeat_t **table, uint64_t kernel, uint32_t region, uint64_t lane, uint64_t at,
                        long pass_len);

void ft_res_repeat_free(ft_res_repeat_t **table);

/* Why a touch is taken for a stale address (bits). */
enum {
    FT_RES_STALE_UNSURE = 1,     /* found only at a word that held garbage in discovery */
    FT_RES_STALE_WEIGHTLESS = 2, /* by a kernel that touched no weight in the record */
    FT_RES_STALE_OUTSIDE = 4,    /* at a position outside the unit's range */
    FT_RES_STALE_REPEAT = 8,     /* by the repeat rule */
};

/* One touch of a streamed unit by a call. */
typedef struct {
    int unsure;
    int weightless;
    long pos;   /* the launch's position (ft_res_lane_pos); -1: none, or a copy or set */
    long at;    /* launches since the lane's pass began, off the record too; -1 */
    int repeat; /* ft_res_repeat_touch's answer */
    /* The unit is the streamed one after the unit the lane's pass last placed (whose
     * first touch after its load said where the pass is): the pass is there, however
     * far `at` has drifted from the record (a pass with launches the record lacks). */
    int follows;
} ft_res_touch_t;

typedef enum {
    FT_RES_USE,   /* loaded: the call waits for its copy and records its use */
    FT_RES_MISS,  /* not loaded: loaded now, on the caller's stream */
    FT_RES_LEAVE, /* not loaded and stale: loads nothing (FT_STRICT_GUARD=0 only) */
} ft_res_act_t;

typedef struct {
    ft_res_act_t act;
    unsigned stale; /* FT_RES_STALE_* bits; 0: not stale */
    /* The touch says where the pass is (not stale, not far from the range): a unit's
     * first such touch after its load prefetches what follows it. */
    int placing;
} ft_res_verdict_t;

/* The guard's judgement of touch t of a unit with `range`, loaded or not. A touch
 * outside the range, or by a weightless kernel, is garbage that looks like a pointer,
 * in a word that held NULL or an activation's address in discovery. A stale touch of a
 * loaded unit is a use like any other (a wait costs nothing there). strict
 * (FT_STRICT_GUARD) loads every unit a call touches: a stale touch of a unit not loaded
 * is a miss too, because a kernel that really read the weight would fault. */
ft_res_verdict_t ft_res_classify(const ft_res_touch_t *t, ft_res_range_t range, int loaded,
                                 const ft_res_pass_t *pass, int strict);

/* Whether a region of a streamed unit streams with it, and if not why. */
typedef enum {
    FT_RES_REGION_STREAMS,
    FT_RES_REGION_UNMAPPED, /* not backed by virtual memory (below FT_VMM_MIN_SIZE, or
                             * allocated where the shim does not serve it): its memory
                             * cannot be unmapped; small by definition, or not the
                             * shim's to move */
    FT_RES_REGION_SHARED,   /* touched from other units' ranges too: streaming it would
                             * load its unit once per user */
    FT_RES_REGION_INDIRECT, /* reached only through pointer arrays: the guard reads no
                             * device memory, so it could not load it for the launch
                             * that uses it */
} ft_res_region_t;

/* known: discovery still has the region; vmm: it is backed by virtual memory; shared
 * and indirect_only as discovery found them. A region discovery no longer has stays
 * too (FT_RES_REGION_UNMAPPED). */
ft_res_region_t ft_res_region(int known, int vmm, int shared, int indirect_only);

/* What an unload does with a unit's bytes. sum_ok: its device checksum now could be had
 * (sum); ref_valid: the reference, the checksum of the bytes its host store holds. */
typedef struct {
    int write_back; /* copied back before its memory goes: changed, or not proven equal */
    int changed;    /* proven different from the reference */
} ft_res_unload_t;

ft_res_unload_t ft_res_unload(int sum_ok, uint64_t sum, int ref_valid, uint64_t ref);

/* A unit found changed at this many evictions stays on the device from its next load
 * on (pinned), outside the slots and over the plan's memory by its size: one the
 * application keeps writing would otherwise be copied back at every eviction. */
#define FT_RES_KEEP_AFTER_CHANGES 3

/* Whether the `changes`-th eviction that found the unit changed pins it (once). */
int ft_res_pin(unsigned changes);

#endif
