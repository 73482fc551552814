/* otelloop._progress: the progress tracker of otelloop/progress.py, in C.
 *
 * The tracker judges every step of every session before the detectors run: whether a tool step brought
 * something new, how many times in a row its call gave the same result, whether it is a retry or a poll.
 * In Python that is a hundred small lines per tool step, about half of what detection costs when most
 * steps bring new work. This module does the same bookkeeping on C records and gives exactly the
 * Python tracker's answers (tests/test_native_progress.py replays the corpora, their variants and
 * random sessions through both and compares every step). otelloop/progress.py stays the reference and
 * the documentation of every rule; the functions below carry its names. What is text work (stable
 * hashes of a key's parts, masking an edit's fragments in a failure's text) is called back in Python
 * (otelloop.progress and the modules it uses): it is needed for few steps, or memoised there.
 *
 * Keys are unsigned 64-bit hashes, as in the Python tracker, which refuses any other (OverflowError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

/* Bounds and flags; tests/test_native_progress.py checks them against otelloop.progress, .work,
 * .mapping.noise, .mapping.results and .mapping.canonical. */
enum {
    MAX_RESULTS = 48, MAX_CALLS = 16, MAX_RUN = 255, MAX_TOOLS = 4, MAX_NOISY = 4, LEARN_AFTER = 2,
    MAX_CHANGES = 255, MAX_CLOCK_TOOLS = 4, MAX_CLOCKS = 4, CALL_COUNT_AFTER = 2, MAX_POLLS = 16, MAX_FORMS = 8,
    MIN_CLOCK_TICKS = 20,
};
enum { BLANK = 1, FAILED = 2, ACK = 4, TRANSIENT = 8, TERSE = 16 };
enum { LEARNABLE = 1, SAYS = 2 };
enum { POLL = 3, FORM = 5 };
#define PATH_SHIFT 32
static const double CLOCK_TOLERANCE = 0.05;
static const double CLOCK_SLACK_NS = 100000000.0;
static const long long CLOCK_UNITS_NS[4] = {1000000000LL, 1000000LL, 1000LL, 1LL};

/* ---- an optional key: a hash, or None ---------------------------------------------------------------- */

typedef struct {
    bool set;
    uint64_t v;
} Key;

static const Key NONE = {false, 0};

static Key some(uint64_t v) { return (Key){true, v}; }

/* A key from an int (None: unset); -1 with OverflowError for a negative or wider int, as the Python
 * tracker's key arrays refuse it. */
static int to_key(PyObject *obj, Key *out) {
    if (obj == Py_None) {
        *out = NONE;
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "a key must be an int or None, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    /* Hashes take three of CPython's 30-bit digits, where PyLong_AsUnsignedLongLong converts byte by byte:
     * an int known to fit is read digit by digit instead (exact, not masked, for such an int). */
    if (_PyLong_Sign(obj) >= 0) {
        size_t bits = _PyLong_NumBits(obj);
        if (bits <= 64) {
            *out = some((uint64_t)PyLong_AsUnsignedLongLongMask(obj));
            return 0;
        }
        if (bits == (size_t)-1)
            PyErr_Clear(); /* too large to count: refused below */
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = some((uint64_t)v);
    return 0;
}

static PyObject *key_object(Key k) {
    if (!k.set)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(k.v);
}

/* ---- growable arrays of keys, as the Python tracker's array("Q") --------------------------------------- */

typedef struct {
    uint64_t *v;
    int n, cap;
} Vec;

static int vec_reserve(Vec *a, int n) {
    if (n <= a->cap)
        return 0;
    int cap = a->cap ? a->cap : 4;
    while (cap < n)
        cap *= 2;
    uint64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(uint64_t));
    if (v == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    a->v = v;
    a->cap = cap;
    return 0;
}

static int vec_push(Vec *a, uint64_t x) {
    if (vec_reserve(a, a->n + 1) < 0)
        return -1;
    a->v[a->n++] = x;
    return 0;
}

static void vec_del(Vec *a, int at, int count) {
    memmove(a->v + at, a->v + at + count, (size_t)(a->n - at - count) * sizeof(uint64_t));
    a->n -= count;
}

/* Index of the first entry (stride values each) whose first value is x, or -1 (otelloop.keys.find_entry). */
static int vec_find(const Vec *a, uint64_t x, int stride) {
    for (int i = 0; i < a->n; i += stride)
        if (a->v[i] == x)
            return i;
    return -1;
}

static void vec_free(Vec *a) {
    PyMem_Free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* ---- the records of one session ------------------------------------------------------------------------- */

/* progress.ToolMemory */
typedef struct {
    uint64_t tool, call;
    bool has_leaves;
    Vec leaves, tokens;
    uint64_t noisy[MAX_NOISY];
    uint8_t changes[MAX_NOISY];
    int nnoisy;
} ToolMemory;

/* A small map of keys to signed counts, in insertion order (a Python dict of at most a few keys). */
typedef struct {
    uint64_t key;
    long long value;
} Pair;

typedef struct {
    Pair *v;
    int n, cap;
} Map;

static int map_find(const Map *m, uint64_t key) {
    for (int i = 0; i < m->n; i++)
        if (m->v[i].key == key)
            return i;
    return -1;
}

static long long map_get(const Map *m, uint64_t key, long long otherwise) {
    int i = map_find(m, key);
    return i < 0 ? otherwise : m->v[i].value;
}

static int map_set(Map *m, uint64_t key, long long value) {
    int i = map_find(m, key);
    if (i >= 0) {
        m->v[i].value = value;
        return 0;
    }
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 4;
        Pair *v = PyMem_Realloc(m->v, (size_t)cap * sizeof(Pair));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = (Pair){key, value};
    return 0;
}

static void map_free(Map *m) {
    PyMem_Free(m->v);
    m->v = NULL;
    m->n = m->cap = 0;
}

/* A bounded list of at most MAX_CLOCKS keys (noise.ToolClock's clocks, counts, jitter). */
typedef struct {
    uint64_t v[MAX_CLOCKS];
    int n;
} Few;

static bool few_has(const Few *f, uint64_t key) {
    for (int i = 0; i < f->n; i++)
        if (f->v[i] == key)
            return true;
    return false;
}

/* noise._bounded_add */
static bool few_add(Few *f, uint64_t key) {
    if (few_has(f, key))
        return false;
    if (f->n >= MAX_CLOCKS) {
        memmove(f->v, f->v + 1, (MAX_CLOCKS - 1) * sizeof(uint64_t));
        f->n--;
    }
    f->v[f->n++] = key;
    return true;
}

static void few_remove(Few *f, uint64_t key) {
    for (int i = 0; i < f->n; i++)
        if (f->v[i] == key) {
            memmove(f->v + i, f->v + i + 1, (size_t)(f->n - i - 1) * sizeof(uint64_t));
            f->n--;
            return;
        }
}

/* noise.ToolClock. numbers: the result's counters (key, value, ...) as the step gave them (a tuple, or NULL
 * for none): values are ints of any size. */
typedef struct {
    uint64_t tool, call, free, output;
    PyObject *start_ns;
    long long seq;
    PyObject *numbers;
    Few clocks, counts, jitter;
    Map signs, ticks;
} ToolClock;

/* progress.ProgressState, with noise.ClockTable and work.WorkState in it. */
typedef struct {
    PyObject_HEAD
    long long count, stale;
    Vec seen;
    Vec calls, results;
    uint8_t runs[MAX_CALLS];
    ToolMemory *tools[MAX_TOOLS]; /* least recently used first */
    int ntools;
    ToolClock *clocks[MAX_CLOCK_TOOLS];
    int nclocks;
    long long clock_seq;
    long long acts;
    Vec polls, forms;
    bool paced;
    PyObject *edit;    /* the last write's (put in, taken out) fragments, or NULL */
    PyObject *failure; /* a progress.Failure, or NULL */
} State;

/* ---- what the tracker calls back in Python, looked up once ------------------------------------------- */

static struct {
    bool ready;
    PyObject *stable, *hash_bytes, *fold, *tracks_clock, *mask, *failure_hash, *failure_key, *failure_type;
    PyObject *s_tool, *s_error, *s_file, *s_edit, *s_write, *s_blank, *s_ack, *s_echo, *s_clocks;
    PyObject *s_llm, *s_success, *s_exec, *leaves_prefix, *one_e9;
    /* attribute names of a step and of a failure */
    PyObject *kind, *name, *output_hash, *args_hash, *leaves, *arg_tokens, *result_tokens, *numbers, *outcome,
        *error_hash, *tool_class, *edit_fragments, *result_flags, *echo, *args_key, *start_ns, *numbers_free,
        *content_hash, *file_path, *edit_old_hash, *edit_new_hash, *target, *args_form, *output_text, *result,
        *novel, *repeats, *tool_repeats, *wait, *retry, *progress, *stale, *call, *key, *text, *text_hash;
} py;

static PyObject *attr_of(const char *module, const char *name) {
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL)
        return NULL;
    PyObject *value = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return value;
}

/* Where a step keeps each field the tracker reads or writes: otelloop.model.Step is a dataclass with slots,
 * whose fields are object members at fixed offsets. Reading them there skips the attribute lookup (a type
 * dictionary search and a descriptor call per field, a third of the tracker's time); any other object (a
 * subclass, a stand-in in a test) goes through getattr and setattr. */
#define MAX_FIELDS 40
/* The fields by the address of their interned name, open addressing: a power of two well above MAX_FIELDS,
 * so a probe ends after a step or two (a scan of the names cost a tenth of the tracker's time). */
#define FIELD_SLOTS 128
static struct {
    PyTypeObject *type;
    int n;
    PyObject *name[FIELD_SLOTS];
    Py_ssize_t offset[FIELD_SLOTS];
} fields;

static size_t field_slot(PyObject *name) {
    return (size_t)((((uintptr_t)name >> 4) * 0x9E3779B97F4A7C15ull) >> 57); /* the top 7 bits */
}

static Py_ssize_t field_offset(PyObject *obj, PyObject *name) {
    if (Py_TYPE(obj) != fields.type)
        return -1;
    for (size_t i = field_slot(name);; i = (i + 1) & (FIELD_SLOTS - 1)) {
        if (fields.name[i] == name)
            return fields.offset[i];
        if (fields.name[i] == NULL)
            return -1;
    }
}

/* getattr(obj, name) */
static PyObject *get_attr(PyObject *obj, PyObject *name) {
    Py_ssize_t offset = field_offset(obj, name);
    if (offset < 0)
        return PyObject_GetAttr(obj, name);
    PyObject *value = *(PyObject **)((char *)obj + offset);
    if (value == NULL) {
        PyErr_SetObject(PyExc_AttributeError, name);
        return NULL;
    }
    Py_INCREF(value);
    return value;
}

/* setattr(obj, name, value) */
static int set_attr(PyObject *obj, PyObject *name, PyObject *value) {
    Py_ssize_t offset = field_offset(obj, name);
    if (offset < 0)
        return PyObject_SetAttr(obj, name, value);
    Py_INCREF(value);
    Py_XSETREF(*(PyObject **)((char *)obj + offset), value);
    return 0;
}

static int intern(PyObject **slot, const char *text);

/* The offsets of Step's fields among names (a field that is not a plain object member is left to getattr). */
static int step_fields(void *table, size_t n) {
    struct entry {
        PyObject **slot;
        const char *text;
    } *names = table;
    PyObject *type = attr_of("otelloop.model", "Step");
    if (type == NULL)
        return -1;
    if (!PyType_Check(type)) {
        Py_DECREF(type);
        return 0;
    }
    fields.type = (PyTypeObject *)type; /* kept for the module's life */
    for (size_t i = 0; i < n && fields.n < MAX_FIELDS; i++) {
        PyObject *descr = PyObject_GetAttr(type, *names[i].slot);
        if (descr == NULL) {
            PyErr_Clear(); /* not a step's field (a failure's) */
            continue;
        }
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY)) {
                size_t at = field_slot(*names[i].slot);
                while (fields.name[at] != NULL && fields.name[at] != *names[i].slot)
                    at = (at + 1) & (FIELD_SLOTS - 1);
                if (fields.name[at] == NULL)
                    fields.n++;
                fields.name[at] = *names[i].slot;
                fields.offset[at] = member->offset;
            }
        }
        Py_DECREF(descr);
    }
    return 0;
}

static int intern(PyObject **slot, const char *text) {
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

static int ready(void) {
    if (py.ready)
        return 0;
    if (!(py.stable = attr_of("otelloop.progress", "_stable")) ||
        !(py.hash_bytes = attr_of("otelloop.mapping.canonical", "hash_bytes")) ||
        !(py.fold = attr_of("otelloop.work", "fold")) ||
        !(py.tracks_clock = attr_of("otelloop.mapping.noise", "tracks_clock")) ||
        !(py.mask = attr_of("otelloop.mapping.fragments", "mask")) ||
        !(py.failure_hash = attr_of("otelloop.progress", "_failure_hash")) ||
        !(py.failure_key = attr_of("otelloop.progress", "_failure_key")) ||
        !(py.failure_type = attr_of("otelloop.progress", "Failure")))
        return -1;
    if (intern(&py.s_tool, "tool") || intern(&py.s_error, "error") || intern(&py.s_file, "file") ||
        intern(&py.s_edit, "edit") || intern(&py.s_write, "write") || intern(&py.s_blank, "blank") ||
        intern(&py.s_ack, "ack") || intern(&py.s_echo, "echo") || intern(&py.s_clocks, "clocks") ||
        intern(&py.s_llm, "llm") || intern(&py.s_success, "success") || intern(&py.s_exec, "exec"))
        return -1;
    if (!(py.leaves_prefix = PyBytes_FromString("leaves")) || !(py.one_e9 = PyFloat_FromDouble(1e9)))
        return -1;
    struct entry {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&py.kind, "kind"}, {&py.name, "name"}, {&py.output_hash, "output_hash"}, {&py.args_hash, "args_hash"},
        {&py.leaves, "leaves"}, {&py.arg_tokens, "arg_tokens"}, {&py.result_tokens, "result_tokens"},
        {&py.numbers, "numbers"}, {&py.outcome, "outcome"}, {&py.error_hash, "error_hash"},
        {&py.tool_class, "tool_class"}, {&py.edit_fragments, "edit_fragments"}, {&py.result_flags, "result_flags"},
        {&py.echo, "echo"}, {&py.args_key, "args_key"}, {&py.start_ns, "start_ns"},
        {&py.numbers_free, "numbers_free"}, {&py.content_hash, "content_hash"}, {&py.file_path, "file_path"},
        {&py.edit_old_hash, "edit_old_hash"}, {&py.edit_new_hash, "edit_new_hash"}, {&py.target, "target"},
        {&py.args_form, "args_form"}, {&py.output_text, "output_text"}, {&py.result, "result"},
        {&py.novel, "novel"}, {&py.repeats, "repeats"}, {&py.tool_repeats, "tool_repeats"}, {&py.wait, "wait"},
        {&py.retry, "retry"}, {&py.progress, "progress"}, {&py.stale, "stale"}, {&py.call, "call"},
        {&py.key, "key"}, {&py.text, "text"}, {&py.text_hash, "text_hash"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (intern(names[i].slot, names[i].text) < 0)
            return -1;
    if (step_fields(names, sizeof names / sizeof names[0]) < 0)
        return -1;
    py.ready = true;
    return 0;
}

/* progress._stable(tag, *parts) & MASK: a stable hash of a key's parts (memoised in Python). */
static int stable(Key *out, PyObject *tag, int n, PyObject *const *parts) {
    PyObject *args[8];
    args[0] = tag;
    for (int i = 0; i < n; i++)
        args[i + 1] = parts[i];
    PyObject *h = PyObject_Vectorcall(py.stable, args, (size_t)n + 1, NULL);
    if (h == NULL)
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLongMask(h);
    Py_DECREF(h);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = some((uint64_t)v);
    return 0;
}

/* _stable(tag, *parts) of parts given as keys */
static int stable_keys(Key *out, PyObject *tag, PyObject *first, int n, const uint64_t *keys) {
    PyObject *parts[6];
    int k = 0, ok = 0;
    if (first != NULL)
        parts[k++] = first;
    for (int i = 0; i < n; i++) {
        parts[k] = PyLong_FromUnsignedLongLong(keys[i]);
        if (parts[k] == NULL)
            goto done;
        k++;
    }
    ok = stable(out, tag, k, parts) == 0;
done:
    for (int i = first != NULL; i < k; i++)
        Py_DECREF(parts[i]);
    return ok ? 0 : -1;
}

/* ---- reading and writing a step ------------------------------------------------------------------------ */

/* The step's attribute as a key; -1 on error. */
static int step_key(PyObject *step, PyObject *name, Key *out) {
    PyObject *value = get_attr(step, name);
    if (value == NULL)
        return -1;
    int rc = to_key(value, out);
    Py_DECREF(value);
    return rc;
}

static int step_u64(PyObject *step, PyObject *name, uint64_t *out) {
    Key k;
    if (step_key(step, name, &k) < 0)
        return -1;
    *out = k.v;
    return 0;
}

static int step_long(PyObject *step, PyObject *name, long *out) {
    PyObject *value = get_attr(step, name);
    if (value == NULL)
        return -1;
    *out = PyLong_AsLong(value);
    Py_DECREF(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int set_long(PyObject *step, PyObject *name, long long v) {
    PyObject *value = PyLong_FromLongLong(v);
    if (value == NULL)
        return -1;
    int rc = set_attr(step, name, value);
    Py_DECREF(value);
    return rc;
}

static int set_key(PyObject *step, PyObject *name, Key k) {
    PyObject *value = key_object(k);
    if (value == NULL)
        return -1;
    int rc = set_attr(step, name, value);
    Py_DECREF(value);
    return rc;
}

static bool str_is(PyObject *value, const char *text) {
    return PyUnicode_Check(value) && PyUnicode_CompareWithASCIIString(value, text) == 0;
}

/* The keys of a sequence of ints (a step's leaves or tokens), into a (cleared) vector. */
static int keys_of(PyObject *seq, Vec *out) {
    out->n = 0;
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of keys");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    int rc = vec_reserve(out, (int)n);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        Key k;
        if (to_key(items[i], &k) < 0 || !k.set) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a key must be an int");
            rc = -1;
        } else
            out->v[out->n++] = k.v;
    }
    Py_DECREF(fast);
    return rc;
}

/* What the tracker reads of one step, once. */
typedef struct {
    PyObject *step, *name, *args_hash_obj, *numbers, *outcome_obj;
    bool tool, error, write, exec;
    long flags;
    Key output_hash, args_hash, error_hash;
    uint64_t echo;
    PyObject *start_ns;
    Vec leaves, arg_tokens, result_tokens;
    bool has_leaves;
} Read;

static void read_free(Read *r) {
    Py_XDECREF(r->name);
    Py_XDECREF(r->args_hash_obj);
    Py_XDECREF(r->numbers);
    Py_XDECREF(r->outcome_obj);
    Py_XDECREF(r->start_ns);
    vec_free(&r->leaves);
    vec_free(&r->arg_tokens);
    vec_free(&r->result_tokens);
}

/* hash((step.name, step.args_hash)) & MASK: the call's key, as the Python tracker forms it. */
static int call_key(Read *r, uint64_t *out) {
    PyObject *pair = PyTuple_Pack(2, r->name, r->args_hash_obj);
    if (pair == NULL)
        return -1;
    Py_hash_t h = PyObject_Hash(pair);
    Py_DECREF(pair);
    if (h == -1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)h;
    return 0;
}

/* hash(step.name) & MASK: the key of the tool's runs whatever its arguments. */
static int name_key(Read *r, uint64_t *out) {
    Py_hash_t h = PyObject_Hash(r->name);
    if (h == -1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)h;
    return 0;
}

static int tool_hash(Read *r, uint64_t *out) {
    Key k;
    if (stable(&k, py.s_tool, 1, &r->name) < 0)
        return -1;
    *out = k.v;
    return 0;
}

/* ---- results and calls remembered ----------------------------------------------------------------------- */

/* progress._remember_result: true when the key was not seen before. */
static int remember_result(State *s, uint64_t key, bool *fresh) {
    if (vec_find(&s->seen, key, 1) >= 0) {
        if (fresh)
            *fresh = false;
        return 0;
    }
    if (s->seen.n >= MAX_RESULTS)
        vec_del(&s->seen, 0, 1);
    if (fresh)
        *fresh = true;
    return vec_push(&s->seen, key);
}

static void del_call(State *s, int i) {
    vec_del(&s->calls, i, 1);
    vec_del(&s->results, i, 1);
    memmove(s->runs + i, s->runs + i + 1, (size_t)(s->calls.n - i));
}

/* progress._remember_call: the run of the call's result, now; -1 on error. */
static int remember_call(State *s, uint64_t call, uint64_t key) {
    int run = 1;
    int i = vec_find(&s->calls, call, 1);
    if (i >= 0) {
        if (key && s->results.v[i] == key)
            run = s->runs[i] + 1 < MAX_RUN ? s->runs[i] + 1 : MAX_RUN;
        del_call(s, i);
    } else if (s->calls.n >= MAX_CALLS)
        del_call(s, 0);
    if (vec_push(&s->calls, call) < 0 || vec_push(&s->results, key) < 0)
        return -1;
    s->runs[s->calls.n - 1] = (uint8_t)run;
    return run;
}

/* progress._rekey_call */
static void rekey_call(State *s, uint64_t call, uint64_t key, Key only_if) {
    int i = vec_find(&s->calls, call, 1);
    if (i >= 0 && (!only_if.set || s->results.v[i] == only_if.v))
        s->results.v[i] = key;
}

/* progress._forget_call */
static void forget_call(State *s, uint64_t call) {
    int i = vec_find(&s->calls, call, 1);
    if (i >= 0)
        del_call(s, i);
}

/* ---- structured results (progress._compare_structure and its helpers) ------------------------------ */

static ToolMemory *tool_memory(State *s, uint64_t tool) {
    for (int i = 0; i < s->ntools; i++)
        if (s->tools[i]->tool == tool)
            return s->tools[i];
    return NULL;
}

static void memory_free(ToolMemory *m) {
    vec_free(&m->leaves);
    vec_free(&m->tokens);
    PyMem_Free(m);
}

/* progress._count_change */
static void count_change(ToolMemory *m, uint64_t path) {
    for (int i = 0; i < m->nnoisy; i++)
        if (m->noisy[i] == path) {
            m->changes[i] = m->changes[i] + 1 < MAX_CHANGES ? m->changes[i] + 1 : MAX_CHANGES;
            return;
        }
    if (m->nnoisy < MAX_NOISY) {
        m->noisy[m->nnoisy] = path;
        m->changes[m->nnoisy++] = 1;
        return;
    }
    int j = 0;
    for (int i = 1; i < m->nnoisy; i++)
        if (m->changes[i] < m->changes[j])
            j = i;
    m->noisy[j] = path;
    m->changes[j] = 1;
}

/* The paths learned as noise (times >= LEARN_AFTER), into learned[]; how many. */
static int learned(const ToolMemory *m, uint64_t *out) {
    int n = 0;
    for (int i = 0; i < m->nnoisy; i++)
        if (m->changes[i] >= LEARN_AFTER)
            out[n++] = m->noisy[i];
    return n;
}

/* progress._learn */
static int learn(ToolMemory *m, uint64_t call, const Read *r, uint64_t *noisy) {
    const Vec *old = &m->leaves, *now = &r->leaves;
    if (r->has_leaves && m->has_leaves && m->call == call && old->n == now->n) {
        int changed = 0;
        bool same_paths = true, kept = false;
        for (int i = 0; i < now->n; i++) {
            uint64_t prev = old->v[i], new = now->v[i];
            if (prev != new)
                changed++;
            if (prev >> PATH_SHIFT != new >> PATH_SHIFT)
                same_paths = false;
            if (prev == new && (new & SAYS))
                kept = true;
        }
        if (same_paths && kept && changed > 0 && changed <= 2)
            for (int i = 0; i < now->n; i++)
                if (old->v[i] != now->v[i] && (now->v[i] & LEARNABLE))
                    count_change(m, now->v[i] >> PATH_SHIFT);
    }
    return learned(m, noisy);
}

/* progress._without: hash_bytes(b"leaves" + the leaves, the values at noisy paths left out). */
static int without(const Vec *leaves, const uint64_t *noisy, int nnoisy, uint64_t *out) {
    Py_ssize_t prefix = PyBytes_GET_SIZE(py.leaves_prefix);
    PyObject *data = PyBytes_FromStringAndSize(NULL, prefix + (Py_ssize_t)leaves->n * 8);
    if (data == NULL)
        return -1;
    char *buf = PyBytes_AS_STRING(data);
    memcpy(buf, PyBytes_AS_STRING(py.leaves_prefix), (size_t)prefix);
    for (int i = 0; i < leaves->n; i++) {
        uint64_t leaf = leaves->v[i], path = leaf >> PATH_SHIFT;
        for (int j = 0; j < nnoisy; j++)
            if (noisy[j] == path) {
                leaf = path << PATH_SHIFT;
                break;
            }
        memcpy(buf + prefix + 8 * i, &leaf, 8); /* array("Q").tobytes(): the machine's byte order */
    }
    PyObject *h = PyObject_CallOneArg(py.hash_bytes, data);
    Py_DECREF(data);
    if (h == NULL)
        return -1;
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(h);
    Py_DECREF(h);
    return PyErr_Occurred() ? -1 : 0;
}

/* progress._with_echo */
static int with_echo(uint64_t output, uint64_t echo, uint64_t *out) {
    if (!echo) {
        *out = output;
        return 0;
    }
    uint64_t parts[2] = {output, echo};
    Key k;
    if (stable_keys(&k, py.s_echo, NULL, 2, parts) < 0)
        return -1;
    *out = k.v;
    return 0;
}

/* progress._store: the tool's memory becomes the most recent, holding this result. */
static int store(State *s, ToolMemory *m, uint64_t tool, uint64_t call, const Read *r) {
    if (m != NULL) {
        int i = 0;
        while (s->tools[i] != m)
            i++;
        memmove(s->tools + i, s->tools + i + 1, (size_t)(s->ntools - i - 1) * sizeof(ToolMemory *));
        s->ntools--;
    } else {
        m = PyMem_Calloc(1, sizeof(ToolMemory));
        if (m == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->tool = tool;
        if (s->ntools >= MAX_TOOLS) {
            memory_free(s->tools[0]);
            memmove(s->tools, s->tools + 1, (MAX_TOOLS - 1) * sizeof(ToolMemory *));
            s->ntools--;
        }
    }
    s->tools[s->ntools++] = m;
    m->call = call;
    m->has_leaves = r->has_leaves;
    m->leaves.n = 0;
    if (r->has_leaves) {
        if (vec_reserve(&m->leaves, r->leaves.n) < 0)
            return -1;
        memcpy(m->leaves.v, r->leaves.v, (size_t)r->leaves.n * 8);
        m->leaves.n = r->leaves.n;
    } else
        vec_free(&m->leaves);
    m->tokens.n = 0;
    if (r->result_tokens.n) {
        if (vec_reserve(&m->tokens, r->result_tokens.n) < 0)
            return -1;
        memcpy(m->tokens.v, r->result_tokens.v, (size_t)r->result_tokens.n * 8);
        m->tokens.n = r->result_tokens.n;
    } else
        vec_free(&m->tokens);
    return 0;
}

/* progress._compare_structure: the output hash to judge the step by. */
static int compare_structure(State *s, Read *r, Key *output) {
    uint64_t tool;
    if (tool_hash(r, &tool) < 0)
        return -1;
    ToolMemory *m = tool_memory(s, tool);
    bool paging = false;
    if (m != NULL && r->arg_tokens.n) {
        Key args_key;
        if (step_key(r->step, py.args_key, &args_key) < 0)
            return -1;
        if (args_key.set) {
            paging = true;
            for (int i = 0; paging && i < r->arg_tokens.n; i++)
                paging = vec_find(&m->tokens, r->arg_tokens.v[i], 1) >= 0;
            if (paging) {
                PyObject *value = key_object(args_key);
                if (value == NULL || set_attr(r->step, py.args_hash, value) < 0) {
                    Py_XDECREF(value);
                    return -1;
                }
                Py_SETREF(r->args_hash_obj, value);
                r->args_hash = args_key;
            }
        }
    }
    uint64_t call = r->args_hash.set ? r->args_hash.v : 0;
    uint64_t echo = paging ? 0 : r->echo;
    *output = r->output_hash;
    if (m != NULL) {
        uint64_t noisy[MAX_NOISY];
        int n = learn(m, call, r, noisy);
        if (n && r->has_leaves) {
            uint64_t h;
            if (without(&r->leaves, noisy, n, &h) < 0)
                return -1;
            *output = some(h);
            if (m->has_leaves && m->call == call) {
                uint64_t old;
                if (without(&m->leaves, noisy, n, &old) < 0 || with_echo(old, echo, &old) < 0 ||
                    remember_result(s, old, NULL) < 0)
                    return -1;
            }
        }
    }
    if (store(s, m, tool, call, r) < 0)
        return -1;
    if (output->set && with_echo(output->v, echo, &output->v) < 0)
        return -1;
    return 0;
}

/* ---- counters that track the clock (noise.ClockTable) ---------------------------------------------------- */

static void clock_free(ToolClock *c) {
    Py_XDECREF(c->start_ns);
    Py_XDECREF(c->numbers);
    map_free(&c->signs);
    map_free(&c->ticks);
    PyMem_Free(c);
}

/* noise.counts_calls: 1 or -1 for a change by one call's worth, else 0. */
static int counts_calls(__int128 change, long long calls) {
    if (change == 1 || change == calls)
        return 1;
    if (change == -1 || change == -(__int128)calls)
        return -1;
    return 0;
}

static bool counting(long long row) { return row >= CALL_COUNT_AFTER || row <= -CALL_COUNT_AFTER; }

/* A number's value as a 128-bit integer, when it fits 64 bits (the common case); big: it does not. */
static int value_of(PyObject *obj, __int128 *out, bool *big) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *big = overflow != 0;
    *out = v;
    return 0;
}

/* noise.tracks_clock, in C where doubles give Python's answer exactly (a change and an elapsed time within
 * 2**53: converted exactly, and one correctly rounded division, as Python's int / int); else in Python. */
static int tracks_clock(PyObject *new, PyObject *old, __int128 change, bool exact, __int128 elapsed,
                        PyObject *start_ns, PyObject *was_ns) {
    const __int128 limit = (__int128)1 << 53;
    if (exact && change <= 0)
        return 0;
    if (exact && elapsed > -limit && elapsed < limit) {
        if (elapsed <= 0)
            return 0;
        if (change < limit) {
            double c = (double)(long long)change, e = (double)(long long)elapsed;
            for (int i = 0; i < 4; i++) {
                double unit = (double)CLOCK_UNITS_NS[i];
                double expected = e / unit;
                if (expected >= MIN_CLOCK_TICKS &&
                    __builtin_fabs(c - expected) <= expected * CLOCK_TOLERANCE + CLOCK_SLACK_NS / unit)
                    return 1;
            }
            return 0;
        }
    }
    PyObject *d = PyNumber_Subtract(new, old);
    PyObject *e = d == NULL ? NULL : PyNumber_Subtract(start_ns, was_ns);
    PyObject *answer = e == NULL ? NULL : PyObject_CallFunctionObjArgs(py.tracks_clock, d, e, NULL);
    Py_XDECREF(d);
    Py_XDECREF(e);
    if (answer == NULL)
        return -1;
    int yes = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return yes;
}

/* The last value of key in a numbers tuple (dict(zip(pairs, pairs)) keeps the last), or NULL. */
static PyObject *value_at(PyObject *numbers, uint64_t key, int *err) {
    *err = 0;
    if (numbers == NULL)
        return NULL;
    for (Py_ssize_t i = PyTuple_GET_SIZE(numbers) - 2; i >= 0; i -= 2) {
        Key k;
        if (to_key(PyTuple_GET_ITEM(numbers, i), &k) < 0) {
            *err = -1;
            return NULL;
        }
        if (k.v == key)
            return PyTuple_GET_ITEM(numbers, i + 1);
    }
    return NULL;
}

/* noise.ClockTable._tick */
static int tick(ToolClock *c, Map *ticks, uint64_t key, int sign, bool *fresh) {
    long long before = map_get(&c->ticks, key, 0);
    long long row = before * sign > 0 ? before + sign : sign;
    if (ticks->n < MAX_CLOCKS && map_set(ticks, key, row) < 0)
        return -1;
    if (counting(row) && !counting(before))
        *fresh = true;
    return 0;
}

/* A tool's previous result, kept when a counter was learned at this one (noise.ClockTable.observe's
 * ``before``). */
typedef struct {
    bool set;
    uint64_t call, free, output;
    PyObject *numbers;
} Before;

/* noise.ClockTable.observe. noise: the keys of the result's numbers that are noise (at most as many as the
 * result has numbers), and how many; before: the tool's previous result when a key was learned now. */
static int clocks_observe(State *s, uint64_t tool, uint64_t call, PyObject *start_ns, PyObject *numbers,
                          uint64_t free, uint64_t output, Vec *noise, Before *before) {
    ToolClock *c = NULL;
    for (int i = 0; i < s->nclocks; i++)
        if (s->clocks[i]->tool == tool) {
            c = s->clocks[i];
            memmove(s->clocks + i, s->clocks + i + 1, (size_t)(s->nclocks - i - 1) * sizeof(ToolClock *));
            s->nclocks--;
            break;
        }
    if (c == NULL) {
        c = PyMem_Calloc(1, sizeof(ToolClock));
        if (c == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->tool = tool;
        c->start_ns = PyLong_FromLong(0);
        if (c->start_ns == NULL) {
            PyMem_Free(c);
            return -1;
        }
        if (s->nclocks >= MAX_CLOCK_TOOLS) {
            clock_free(s->clocks[0]);
            memmove(s->clocks, s->clocks + 1, (MAX_CLOCK_TOOLS - 1) * sizeof(ToolClock *));
            s->nclocks--;
        }
    }
    /* from here on c is held by neither list: put back (appended) on every path */
    int rc = -1;
    Map signs = {0}, ticks = {0};
    bool fresh = false;
    __int128 start = 0, was = 0;
    bool start_big = false, was_big = false;
    if (value_of(start_ns, &start, &start_big) < 0 || value_of(c->start_ns, &was, &was_big) < 0)
        goto out;
    bool elapsed_exact = !start_big && !was_big;
    __int128 elapsed = start - was;
    bool alike = call == c->call && free == c->free;
    s->clock_seq++;
    long long calls = c->seq ? s->clock_seq - c->seq : 1;
    Py_ssize_t n = PyTuple_GET_SIZE(numbers);
    bool any_previous = c->numbers != NULL && PyTuple_GET_SIZE(c->numbers) > 0;
    for (Py_ssize_t i = 0; any_previous && i + 1 < n; i += 2) {
        Key key;
        int err;
        if (to_key(PyTuple_GET_ITEM(numbers, i), &key) < 0)
            goto out;
        PyObject *value = PyTuple_GET_ITEM(numbers, i + 1), *old = value_at(c->numbers, key.v, &err);
        if (err)
            goto out;
        if (old == NULL)
            continue;
        /* the change, exactly: in 128 bits when both values fit 64 (nearly always), else in Python */
        __int128 v, o, change;
        bool v_big, o_big, change_exact = true;
        if (value_of(value, &v, &v_big) < 0 || value_of(old, &o, &o_big) < 0)
            goto out;
        if (!v_big && !o_big)
            change = v - o;
        else {
            PyObject *d = PyNumber_Subtract(value, old);
            bool d_big;
            int bad = d == NULL || value_of(d, &change, &d_big) < 0;
            Py_XDECREF(d);
            if (bad)
                goto out;
            change_exact = !d_big;
        }
        int equal = change_exact && change == 0, greater = change > 0, sign = 0;
        if (change_exact)
            sign = counts_calls(change, calls);
        else if ((greater = PyObject_RichCompareBool(value, old, Py_GT)) < 0) /* beyond 64 bits: no call's worth */
            goto out;
        if (sign && tick(c, &ticks, key.v, sign, &fresh) < 0)
            goto out;
        if (equal)
            continue;
        if (!few_has(&c->counts, key.v)) {
            int yes = tracks_clock(value, old, change, change_exact && elapsed_exact, elapsed, start_ns, c->start_ns);
            if (yes < 0)
                goto out;
            if (yes)
                fresh |= few_add(&c->clocks, key.v);
            else {
                few_remove(&c->clocks, key.v);
                few_add(&c->counts, key.v);
            }
        }
        if (alike) {
            int now = greater ? 1 : -1;
            if (map_set(&signs, key.v, now) < 0)
                goto out;
            if (map_get(&c->signs, key.v, now) != now)
                fresh |= few_add(&c->jitter, key.v);
        }
    }
    map_free(&c->signs);
    map_free(&c->ticks);
    c->signs = signs;
    c->ticks = ticks;
    signs = (Map){0};
    ticks = (Map){0};
    before->set = false;
    if (fresh && any_previous) {
        before->set = true;
        before->call = c->call;
        before->free = c->free;
        before->output = c->output;
        before->numbers = c->numbers; /* the reference moves to before */
        Py_INCREF(before->numbers);
    }
    c->call = call;
    Py_INCREF(start_ns);
    Py_SETREF(c->start_ns, start_ns);
    Py_INCREF(numbers);
    Py_XSETREF(c->numbers, numbers);
    c->free = free;
    c->output = output;
    c->seq = s->clock_seq;
    rc = 0;
    noise->n = 0;
    bool ticking = false;
    for (int i = 0; i < c->ticks.n; i++)
        ticking |= counting(c->ticks.v[i].value);
    if (!(c->clocks.n || c->jitter.n || ticking))
        goto out;
    for (Py_ssize_t i = 0; i + 1 < n; i += 2) {
        Key key;
        if (to_key(PyTuple_GET_ITEM(numbers, i), &key) < 0 || vec_reserve(noise, noise->n + 1) < 0) {
            rc = -1;
            goto out;
        }
        if ((few_has(&c->clocks, key.v) || few_has(&c->jitter, key.v) || counting(map_get(&c->ticks, key.v, 0))) &&
            vec_find(noise, key.v, 1) < 0)
            noise->v[noise->n++] = key.v;
    }
out:
    map_free(&signs);
    map_free(&ticks);
    s->clocks[s->nclocks++] = c;
    return rc;
}

/* noise.without_clocks, hashed: _stable("clocks", free, the counters that are not noise ...). */
static int without_clocks(uint64_t free, PyObject *numbers, const Vec *noise, uint64_t *out) {
    Py_ssize_t n = PyTuple_GET_SIZE(numbers);
    PyObject *args = PyTuple_New(0);
    PyObject *list = PyList_New(0);
    PyObject *f = PyLong_FromUnsignedLongLong(free);
    int rc = -1;
    if (args == NULL || list == NULL || f == NULL || PyList_Append(list, py.s_clocks) < 0 ||
        PyList_Append(list, f) < 0)
        goto done;
    for (Py_ssize_t i = 0; i + 1 < n; i += 2) {
        Key key;
        if (to_key(PyTuple_GET_ITEM(numbers, i), &key) < 0)
            goto done;
        if (vec_find(noise, key.v, 1) >= 0)
            continue;
        if (PyList_Append(list, PyTuple_GET_ITEM(numbers, i)) < 0 ||
            PyList_Append(list, PyTuple_GET_ITEM(numbers, i + 1)) < 0)
            goto done;
    }
    Py_SETREF(args, PyList_AsTuple(list));
    if (args == NULL)
        goto done;
    PyObject *h = PyObject_Call(py.stable, args, NULL);
    if (h == NULL)
        goto done;
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(h);
    Py_DECREF(h);
    rc = PyErr_Occurred() ? -1 : 0;
done:
    Py_XDECREF(args);
    Py_XDECREF(list);
    Py_XDECREF(f);
    return rc;
}

/* progress._mask_clocks (error: of the error's text, under the tool's "error" tag). */
static int mask_clocks(State *s, Read *r, uint64_t output, bool error, uint64_t *out) {
    uint64_t call, tool, free;
    Key k;
    if (call_key(r, &call) < 0 || step_u64(r->step, py.numbers_free, &free) < 0)
        return -1;
    if (error) {
        PyObject *parts[2] = {r->name, py.s_error};
        if (stable(&k, py.s_tool, 2, parts) < 0)
            return -1;
        tool = k.v;
    } else if (tool_hash(r, &tool) < 0)
        return -1;
    Vec noise = {0};
    Before before = {0};
    int rc = -1;
    if (clocks_observe(s, tool, call, r->start_ns, r->numbers, free, output, &noise, &before) < 0)
        goto done;
    if (!noise.n) {
        *out = output;
        rc = 0;
        goto done;
    }
    uint64_t echo = error ? 0 : r->echo, masked;
    if (without_clocks(free, r->numbers, &noise, &masked) < 0 || with_echo(masked, echo, &masked) < 0)
        goto done;
    s->clocks[s->nclocks - 1]->output = masked;
    if (before.set) {
        uint64_t old;
        Key previous = some(before.output);
        if (without_clocks(before.free, before.numbers, &noise, &old) < 0 || with_echo(old, echo, &old) < 0)
            goto done;
        if (error) {
            PyObject *parts[2] = {r->name, NULL};
            Key a, b;
            if (!(parts[1] = PyLong_FromUnsignedLongLong(old)))
                goto done;
            int bad = stable(&a, py.s_error, 2, parts);
            Py_DECREF(parts[1]);
            if (bad || !(parts[1] = PyLong_FromUnsignedLongLong(before.output)))
                goto done;
            bad = stable(&b, py.s_error, 2, parts);
            Py_DECREF(parts[1]);
            if (bad)
                goto done;
            old = a.v;
            previous = b;
        }
        if (remember_result(s, old, NULL) < 0)
            goto done;
        if (before.call == call)
            rekey_call(s, call, old, previous);
    }
    *out = masked;
    rc = 0;
done:
    vec_free(&noise);
    Py_XDECREF(before.numbers);
    return rc;
}

/* ---- failures whose text echoes the last edit (progress._echoed_failure) ------------------------------ */

/* An attribute of a progress.Failure as a key (set: false for None). */
static int failure_key_attr(PyObject *failure, PyObject *name, Key *out) {
    return step_key(failure, name, out);
}

/* _failure_hash(failure, text) as a key; -1 on error. */
static int failure_hash(PyObject *failure, PyObject *text, uint64_t *out) {
    PyObject *h = PyObject_CallFunctionObjArgs(py.failure_hash, failure, text, NULL);
    if (h == NULL)
        return -1;
    Key k;
    int rc = to_key(h, &k);
    Py_DECREF(h);
    *out = k.v;
    return rc;
}

static int echoed_failure(State *s, Read *r, uint64_t call, Key *output) {
    PyObject *previous = s->failure; /* owned here from now on */
    s->failure = NULL;
    PyObject *text = NULL, *failure = NULL, *masked = NULL, *was = NULL, *prev_text = NULL;
    int rc = -1;
    Key judged = r->error ? r->error_hash : *output;
    text = get_attr(r->step, py.output_text);
    if (text == NULL)
        goto done;
    if (!judged.set || text == Py_None || (r->flags & (BLANK | ACK))) {
        rc = 0;
        goto done;
    }
    PyObject *clock_s = PyNumber_TrueDivide(r->start_ns, py.one_e9);
    PyObject *call_obj = PyLong_FromUnsignedLongLong(call);
    PyObject *judged_obj = key_object(judged);
    if (clock_s && call_obj && judged_obj)
        failure = PyObject_CallFunctionObjArgs(py.failure_type, call_obj, r->name, text, clock_s,
                                               r->error ? Py_True : Py_False, judged_obj, NULL);
    Py_XDECREF(clock_s);
    Py_XDECREF(call_obj);
    Py_XDECREF(judged_obj);
    if (failure == NULL)
        goto done;
    if (s->edit != NULL) {
        masked = PyObject_CallFunctionObjArgs(py.mask, text, PyTuple_GET_ITEM(s->edit, 0), NULL);
        if (masked == NULL)
            goto done;
    }
    uint64_t h;
    if (masked != NULL && masked != Py_None) {
        if (failure_hash(failure, text, &h) < 0)
            goto done;
        if (h == judged.v) {
            if (failure_hash(failure, masked, &h) < 0)
                goto done;
            judged = some(h);
            Key prev_call = NONE, prev_key = NONE, prev_text_hash = NONE;
            if (previous != NULL && (failure_key_attr(previous, py.call, &prev_call) < 0 ||
                                     failure_key_attr(previous, py.key, &prev_key) < 0))
                goto done;
            if (previous != NULL && prev_call.v == call && prev_key.set) {
                if (!(prev_text = PyObject_GetAttr(previous, py.text)) ||
                    !(was = PyObject_CallFunctionObjArgs(py.mask, prev_text, PyTuple_GET_ITEM(s->edit, 1), NULL)))
                    goto done;
                if (was != Py_None) {
                    uint64_t again, name;
                    if (failure_hash(previous, prev_text, &again) < 0 ||
                        failure_key_attr(previous, py.text_hash, &prev_text_hash) < 0)
                        goto done;
                    if (prev_text_hash.set && again == prev_text_hash.v) {
                        uint64_t was_hash;
                        Key old;
                        if (failure_hash(previous, was, &was_hash) < 0)
                            goto done;
                        PyObject *arg = PyLong_FromUnsignedLongLong(was_hash);
                        PyObject *key = arg == NULL ? NULL
                                                    : PyObject_CallFunctionObjArgs(py.failure_key, previous, arg, NULL);
                        Py_XDECREF(arg);
                        if (key == NULL)
                            goto done;
                        int bad = to_key(key, &old);
                        Py_DECREF(key);
                        if (bad < 0 || remember_result(s, old.v, NULL) < 0 || name_key(r, &name) < 0)
                            goto done;
                        rekey_call(s, call, old.v, prev_key);
                        rekey_call(s, name, old.v, prev_key);
                    }
                }
            }
            if (r->error) {
                if (set_key(r->step, py.error_hash, judged) < 0)
                    goto done;
                r->error_hash = judged;
            } else
                *output = judged;
        }
    }
    s->failure = failure;
    failure = NULL;
    rc = 0;
done:
    Py_XDECREF(previous);
    Py_XDECREF(text);
    Py_XDECREF(failure);
    Py_XDECREF(masked);
    Py_XDECREF(was);
    Py_XDECREF(prev_text);
    return rc;
}

/* ---- result keys (progress._result_key) -------------------------------------------------------------------- */

static int result_key(Read *r, Key output, Key *out) {
    if (r->error) {
        if (r->error_hash.set) {
            PyObject *parts[2] = {r->name, NULL};
            if (!(parts[1] = key_object(r->error_hash)))
                return -1;
            int rc = stable(out, py.s_error, 2, parts);
            Py_DECREF(parts[1]);
            return rc;
        }
        *out = output;
        return 0;
    }
    if (r->write) {
        Key content, old, new;
        if (step_key(r->step, py.content_hash, &content) < 0)
            return -1;
        PyObject *path = get_attr(r->step, py.file_path);
        if (path == NULL)
            return -1;
        int rc = 0;
        if (content.set) {
            rc = stable_keys(out, py.s_file, path, 1, &content.v);
        } else if ((rc = step_key(r->step, py.edit_old_hash, &old)) == 0 &&
                   (rc = step_key(r->step, py.edit_new_hash, &new)) == 0) {
            if (old.set || new.set) {
                uint64_t pair[2] = {old.v, new.v}; /* unset: 0 */
                if (pair[0] > pair[1]) {
                    pair[0] = new.v;
                    pair[1] = old.v;
                }
                rc = stable_keys(out, py.s_edit, path, 2, pair);
            } else if (!r->args_hash.set)
                *out = NONE;
            else
                rc = stable_keys(out, py.s_write, r->name, 1, &r->args_hash.v);
        }
        Py_DECREF(path);
        return rc;
    }
    if (r->flags & BLANK)
        return stable(out, py.s_blank, 1, &r->name);
    if (r->flags & ACK) {
        if (!r->args_hash.set) {
            *out = NONE;
            return 0;
        }
        return stable_keys(out, py.s_ack, r->name, 1, &r->args_hash.v);
    }
    *out = output;
    return 0;
}

/* ---- polls and batches (otelloop.work) --------------------------------------------------------------------- */

/* work._status */
static bool status(const Read *r, Key key) {
    return key.set && !r->error && !r->write && !r->exec && !(r->flags & (BLANK | FAILED | TRANSIENT | ACK));
}

/* work.poll_wait */
static int poll_wait(State *s, const Read *r, uint64_t call, Key key, long long repeats, long long *wait) {
    Vec *polls = &s->polls;
    int at = vec_find(polls, call, POLL);
    *wait = 0;
    if (r->write || r->exec || (r->flags & ACK))
        s->acts++;
    if (!status(r, key)) {
        if (at >= 0)
            vec_del(polls, at, POLL);
        return 0;
    }
    uint64_t moving = 0;
    if (at >= 0) {
        uint64_t last = polls->v[at + 1], mark = polls->v[at + 2];
        moving = mark & 1;
        if (key.v != last && mark >> 1 == (uint64_t)s->acts)
            moving = 1;
        else if (key.v == last && moving)
            *wait = repeats;
        vec_del(polls, at, POLL);
    }
    if (vec_push(polls, call) < 0 || vec_push(polls, key.v) < 0 || vec_push(polls, ((uint64_t)s->acts << 1) | moving) < 0)
        return -1;
    if (polls->n > MAX_POLLS * POLL)
        vec_del(polls, 0, POLL);
    return 0;
}

/* progress._poll_wait: no allowance once the tool has learned noise. */
static int progress_poll_wait(State *s, Read *r, uint64_t call, Key key, long long repeats, long long *wait) {
    if (poll_wait(s, r, call, key, key.set ? repeats : 0, wait) < 0)
        return -1;
    if (*wait) {
        uint64_t tool, noisy[MAX_NOISY];
        if (tool_hash(r, &tool) < 0)
            return -1;
        ToolMemory *m = tool_memory(s, tool);
        if (m != NULL && learned(m, noisy))
            *wait = 0;
    }
    return 0;
}

static int fold(uint64_t key, uint64_t target, uint64_t *out) {
    PyObject *k = PyLong_FromUnsignedLongLong(key), *t = PyLong_FromUnsignedLongLong(target);
    PyObject *h = k && t ? PyObject_CallFunctionObjArgs(py.fold, k, t, NULL) : NULL;
    Py_XDECREF(k);
    Py_XDECREF(t);
    if (h == NULL)
        return -1;
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(h);
    Py_DECREF(h);
    return PyErr_Occurred() ? -1 : 0;
}

/* progress._batch_key with work.batched and work.target_key: the step's result key, its target folded in
 * when it is one of a batch. */
static int batch_key(State *s, Read *r, uint64_t key, uint64_t call, bool paged, uint64_t *out, bool *of_batch) {
    *out = key;
    *of_batch = false;
    if (paged)
        return 0;
    uint64_t target, form;
    if (step_u64(r->step, py.target, &target) < 0)
        return -1;
    if (!(target != 0 && !r->error && !r->write && (r->flags & (BLANK | TERSE)) && !(r->flags & (FAILED | TRANSIENT))))
        return 0;
    if (step_u64(r->step, py.args_form, &form) < 0)
        return -1;
    Vec *forms = &s->forms;
    int at = vec_find(forms, form, FORM);
    if (at < 0) {
        uint64_t entry[FORM] = {form, target, key, call, 0};
        for (int i = 0; i < FORM; i++)
            if (vec_push(forms, entry[i]) < 0)
                return -1;
        if (forms->n > MAX_FORMS * FORM)
            vec_del(forms, 0, FORM);
        return 0;
    }
    if (!forms->v[at + 4]) {
        if (forms->v[at + 1] == target)
            return 0;
        forms->v[at + 4] = 1;
        uint64_t first_call = forms->v[at + 3], first_key;
        if (fold(forms->v[at + 2], forms->v[at + 1], &first_key) < 0 || remember_result(s, first_key, NULL) < 0)
            return -1;
        rekey_call(s, first_call, first_key, NONE);
    }
    uint64_t folded;
    if (fold(key, target, &folded) < 0)
        return -1;
    if (folded == key)
        return 0;
    if (set_key(r->step, py.result, some(folded)) < 0)
        return -1;
    *out = folded;
    *of_batch = true;
    return 0;
}

/* ---- one step (progress.observe) ----------------------------------------------------------------------- */

static int read_step(Read *r, PyObject *step) {
    PyObject *kind = get_attr(step, py.kind);
    if (kind == NULL)
        return -1;
    r->tool = str_is(kind, "tool");
    bool llm = !r->tool && str_is(kind, "llm");
    Py_DECREF(kind);
    if (!r->tool)
        return llm ? 1 : 2;
    PyObject *tool_class, *value;
    if (!(r->name = get_attr(step, py.name)) || !(r->args_hash_obj = get_attr(step, py.args_hash)) ||
        to_key(r->args_hash_obj, &r->args_hash) < 0 || step_key(step, py.output_hash, &r->output_hash) < 0 ||
        step_key(step, py.error_hash, &r->error_hash) < 0 || step_u64(step, py.echo, &r->echo) < 0 ||
        step_long(step, py.result_flags, &r->flags) < 0 || !(r->outcome_obj = get_attr(step, py.outcome)) ||
        !(r->start_ns = get_attr(step, py.start_ns)) || !(tool_class = get_attr(step, py.tool_class)))
        return -1;
    r->error = str_is(r->outcome_obj, "error");
    r->write = str_is(tool_class, "write");
    r->exec = str_is(tool_class, "exec");
    Py_DECREF(tool_class);
    if (!(value = get_attr(step, py.leaves)))
        return -1;
    r->has_leaves = value != Py_None;
    int rc = r->has_leaves ? keys_of(value, &r->leaves) : 0;
    Py_DECREF(value);
    if (rc < 0 || !(value = get_attr(step, py.arg_tokens)))
        return -1;
    rc = keys_of(value, &r->arg_tokens);
    Py_DECREF(value);
    if (rc < 0 || !(value = get_attr(step, py.result_tokens)))
        return -1;
    rc = keys_of(value, &r->result_tokens);
    Py_DECREF(value);
    if (rc < 0 || !(value = get_attr(step, py.numbers)))
        return -1;
    r->numbers = PySequence_Tuple(value);
    Py_DECREF(value);
    return r->numbers == NULL ? -1 : 0;
}

static int observe_tool(State *s, Read *r) {
    PyObject *step = r->step;
    Key output = r->output_hash;
    Key args = r->args_hash;
    if (r->has_leaves || r->arg_tokens.n || r->result_tokens.n) {
        if (compare_structure(s, r, &output) < 0)
            return -1;
    }
    if (PyTuple_GET_SIZE(r->numbers)) {
        if (r->error && r->error_hash.set) {
            uint64_t h;
            if (mask_clocks(s, r, r->error_hash.v, true, &h) < 0 || set_key(step, py.error_hash, some(h)) < 0)
                return -1;
            r->error_hash = some(h);
        } else if (output.set) {
            if (mask_clocks(s, r, output.v, false, &output.v) < 0)
                return -1;
        }
    }
    uint64_t call;
    if (call_key(r, &call) < 0)
        return -1;
    if (r->write) {
        PyObject *fragments = get_attr(step, py.edit_fragments);
        if (fragments == NULL)
            return -1;
        int put = PyTuple_Check(fragments) && PyTuple_GET_SIZE(fragments) == 2
                      ? PyObject_IsTrue(PyTuple_GET_ITEM(fragments, 0))
                      : -1;
        if (put < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "edit_fragments must be a pair of tuples");
            Py_DECREF(fragments);
            return -1;
        }
        if (put)
            Py_XSETREF(s->edit, fragments);
        else {
            Py_DECREF(fragments);
            Py_CLEAR(s->edit);
        }
    } else if (!r->has_leaves && (r->error || (r->flags & FAILED))) {
        if (echoed_failure(s, r, call, &output) < 0)
            return -1;
    }
    Key key;
    if (result_key(r, output, &key) < 0 || set_key(step, py.result, key) < 0)
        return -1;
    if (s->failure != NULL) {
        PyObject *known = PyObject_GetAttr(s->failure, py.key);
        if (known == NULL)
            return -1;
        int unset = known == Py_None;
        Py_DECREF(known);
        if (unset && set_key(s->failure, py.key, key) < 0)
            return -1;
    }
    long long wait = 0, repeats, retry = 0, tool_repeats = 0;
    if (key.set) {
        uint64_t plain = key.v, folded;
        bool of_batch, fresh;
        bool paged = args.set != r->args_hash.set || args.v != r->args_hash.v;
        if (batch_key(s, r, key.v, call, paged, &folded, &of_batch) < 0 || remember_result(s, folded, &fresh) < 0)
            return -1;
        bool novel = fresh && (of_batch || !(r->flags & BLANK));
        if ((repeats = remember_call(s, call, folded)) < 0 ||
            progress_poll_wait(s, r, call, some(plain), repeats, &wait) < 0)
            return -1;
        if (r->flags & TRANSIENT) {
            if (s->paced)
                wait = repeats;
            else
                retry = repeats;
        }
        if ((r->flags & (BLANK | FAILED)) || r->error) {
            uint64_t name;
            if (name_key(r, &name) < 0 || (tool_repeats = remember_call(s, name, folded)) < 0)
                return -1;
        }
        if (novel) {
            s->count++;
            s->stale = 0;
        } else
            s->stale++;
        if (set_attr(step, py.novel, novel ? Py_True : Py_False) < 0)
            return -1;
    } else {
        uint64_t name;
        if ((repeats = remember_call(s, call, 0)) < 0 || name_key(r, &name) < 0)
            return -1;
        forget_call(s, name);
        if (progress_poll_wait(s, r, call, NONE, 0, &wait) < 0)
            return -1;
        wait = 0; /* an unjudged step's wait is never set */
        s->stale = 0;
    }
    s->paced = false;
    if (set_long(step, py.repeats, repeats) < 0)
        return -1;
    if (key.set && (set_long(step, py.wait, wait) < 0 || (retry && set_long(step, py.retry, retry) < 0) ||
                    (tool_repeats && set_long(step, py.tool_repeats, tool_repeats) < 0)))
        return -1;
    return 0;
}

/* observe(state, step): judge the step against the session's history and record it (progress.observe). */
static PyObject *observe(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

static PyTypeObject StateType;

static PyObject *observe(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &StateType)) {
        PyErr_SetString(PyExc_TypeError, "observe(state, step) takes a State and a step");
        return NULL;
    }
    if (ready() < 0)
        return NULL;
    State *s = (State *)args[0];
    Read r = {0};
    r.step = args[1];
    int kind = read_step(&r, r.step);
    int rc = kind;
    if (kind == 0)
        rc = observe_tool(s, &r);
    else if (kind == 1)
        s->paced = true;
    if (rc >= 0)
        rc = set_long(r.step, py.progress, s->count) < 0 || set_long(r.step, py.stale, s->stale) < 0 ? -1 : 0;
    read_free(&r);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- the State type ------------------------------------------------------------------------------------------- */

/* The Python objects a state holds (the last edit's fragments, the last failure, each clock table's last
 * numbers and span start): visited so that gc.get_referents, and so otelloop.bounds.deep_size (the store's
 * estimate of a session's bytes), sees them. They hold only strings and numbers: no cycle runs through a
 * state, so there is nothing to clear. */
static int state_traverse(State *s, visitproc visit, void *arg) {
    Py_VISIT(s->edit);
    Py_VISIT(s->failure);
    for (int i = 0; i < s->nclocks; i++) {
        Py_VISIT(s->clocks[i]->numbers);
        Py_VISIT(s->clocks[i]->start_ns);
    }
    return 0;
}

static void state_dealloc(State *s) {
    PyObject_GC_UnTrack(s);
    vec_free(&s->seen);
    vec_free(&s->calls);
    vec_free(&s->results);
    vec_free(&s->polls);
    vec_free(&s->forms);
    for (int i = 0; i < s->ntools; i++)
        memory_free(s->tools[i]);
    for (int i = 0; i < s->nclocks; i++)
        clock_free(s->clocks[i]);
    Py_XDECREF(s->edit);
    Py_XDECREF(s->failure);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static size_t vec_bytes(const Vec *a) { return (size_t)a->cap * sizeof(uint64_t); }

/* What the session's state holds in memory, its records and arrays with it (the Python objects it holds
 * are counted by whoever walks its referents: see state_traverse). */
static PyObject *state_sizeof(State *s, PyObject *unused) {
    (void)unused;
    size_t n = sizeof(State) + vec_bytes(&s->seen) + vec_bytes(&s->calls) + vec_bytes(&s->results) +
               vec_bytes(&s->polls) + vec_bytes(&s->forms);
    for (int i = 0; i < s->ntools; i++)
        n += sizeof(ToolMemory) + vec_bytes(&s->tools[i]->leaves) + vec_bytes(&s->tools[i]->tokens);
    for (int i = 0; i < s->nclocks; i++)
        n += sizeof(ToolClock) + (size_t)(s->clocks[i]->signs.cap + s->clocks[i]->ticks.cap) * sizeof(Pair);
    return PyLong_FromSize_t(n);
}

static PyObject *state_kept(State *s, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("{s:i,s:i,s:i,s:i}", "results", s->seen.n, "calls", s->calls.n, "tools", s->ntools,
                         "clock_tools", s->nclocks);
}

static PyObject *state_learned_noise(State *s, PyObject *tool) {
    Key k;
    PyObject *parts[1] = {tool};
    if (ready() < 0 || stable(&k, py.s_tool, 1, parts) < 0)
        return NULL;
    uint64_t noisy[MAX_NOISY];
    ToolMemory *m = tool_memory(s, k.v);
    int n = m == NULL ? 0 : learned(m, noisy);
    PyObject *out = PyList_New(n);
    for (int i = 0; out != NULL && i < n; i++) {
        PyObject *path = PyLong_FromUnsignedLongLong(noisy[i]);
        if (path == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, path);
    }
    return out;
}

static PyObject *state_counts(State *s, void *closure) {
    (void)closure;
    return Py_BuildValue("(LL)", s->count, s->stale);
}

static PyMethodDef state_methods[] = {
    {"__sizeof__", (PyCFunction)state_sizeof, METH_NOARGS, "Bytes the state holds, its records included."},
    {"kept", (PyCFunction)state_kept, METH_NOARGS,
     "How many result keys, calls, tool memories and clock tables the state remembers."},
    {"learned_noise", (PyCFunction)state_learned_noise, METH_O,
     "The path CRCs learned as noise for a tool (progress.learned_noise)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef state_getset[] = {
    {"counts", (getter)state_counts, NULL, "(steps that brought something new, tool steps in a row that did not)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otelloop._progress.State",
    .tp_doc = "The progress tracker's state of one session (otelloop.progress.ProgressState, in C records).",
    .tp_basicsize = sizeof(State),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)state_dealloc,
    .tp_traverse = (traverseproc)state_traverse,
    .tp_methods = state_methods,
    .tp_getset = state_getset,
};

static PyMethodDef methods[] = {
    {"observe", (PyCFunction)(void (*)(void))observe, METH_FASTCALL,
     "observe(state, step): judge the step against the session's history and record it (progress.observe)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otelloop._progress",
    "The progress tracker of otelloop.progress, in C (same answers; see otelloop/_progress.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__progress(void) {
    if (PyType_Ready(&StateType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    struct {
        const char *name;
        long value;
    } constants[] = {
        {"MAX_RESULTS", MAX_RESULTS}, {"MAX_CALLS", MAX_CALLS}, {"MAX_RUN", MAX_RUN}, {"MAX_TOOLS", MAX_TOOLS},
        {"MAX_NOISY", MAX_NOISY}, {"LEARN_AFTER", LEARN_AFTER}, {"MAX_CHANGES", MAX_CHANGES},
        {"MAX_CLOCK_TOOLS", MAX_CLOCK_TOOLS}, {"MAX_CLOCKS", MAX_CLOCKS}, {"CALL_COUNT_AFTER", CALL_COUNT_AFTER},
        {"MAX_POLLS", MAX_POLLS}, {"MAX_FORMS", MAX_FORMS}, {"MIN_CLOCK_TICKS", MIN_CLOCK_TICKS},
        {"BLANK", BLANK}, {"FAILED", FAILED}, {"ACK", ACK}, {"TRANSIENT", TRANSIENT}, {"TERSE", TERSE},
        {"LEARNABLE", LEARNABLE}, {"SAYS", SAYS},
    };
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0)
            goto fail;
    Py_INCREF(&StateType);
    if (PyModule_AddObject(m, "State", (PyObject *)&StateType) < 0) {
        Py_DECREF(&StateType);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
