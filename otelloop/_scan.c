/*
 * otelloop._scan: the native reader of OTLP ExportTraceServiceRequest bytes.
 *
 * Why this exists: otelloop reads about ten attributes of every span. Through the protobuf runtime each
 * read creates Python objects and costs about 0.3 us; parsing the whole request costs more again. This
 * module walks the wire format once in C and hands Python only what the mapping needs: per span its
 * name, ids, times, status, the first "exception" event's type and message, and a dict of the attributes
 * whose keys the mapper asked for, as plain Python values. A few attributes of span events (a tool's input
 * and result in Strands Agents' gen_ai.tool.message and gen_ai.choice events) are handed over the same
 * way, under keys of their own; events of other names are skipped without reading their attributes.
 *
 * Two passes over the bytes:
 *   1. validate: a schema-driven walk of the whole message tree with protobuf's rules (wire types,
 *      varint and length bounds, UTF-8 of every string field, nesting depth), so that a request is
 *      accepted here exactly when the protobuf runtime accepts it. Unknown fields, and known fields
 *      with an unexpected wire type, are skipped as protobuf skips them.
 *   2. extract: knowing the bytes are well formed, collect what the mapper needs.
 *
 * The pure-Python reader in otelloop/otlp/scan.py returns the same values; tests hold the two equal.
 * splice() appends encoded attributes/events to chosen spans and fixes the enclosing length prefixes,
 * copying every other byte unchanged.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

/* protobuf's default recursion limit for parsing (upb: kUpb_WireFormat_DefaultDepthLimit). */
#define MAX_DEPTH 100
#define WT_VARINT 0
#define WT_I64 1
#define WT_LEN 2
#define WT_SGROUP 3
#define WT_EGROUP 4
#define WT_I32 5

/* ------------------------------------------------------------------------------------------------ */
/* Wire primitives                                                                                   */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Cur;

/* Reads a varint of at most 10 bytes; returns 0 on truncation or overlong encoding. */
static inline int rd_varint(Cur *c, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (c->p >= c->end) return 0;
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Reads a tag; returns 0 when malformed (bad varint, field number 0 or out of range). */
static inline int rd_tag(Cur *c, uint32_t *field, int *wt) {
    uint64_t t;
    if (!rd_varint(c, &t) || t > UINT32_MAX) return 0;
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    return *field != 0;
}

/* Reads a length prefix and returns the delimited range; 0 if it runs past the end. */
static inline int rd_len(Cur *c, Cur *sub) {
    uint64_t n;
    if (!rd_varint(c, &n) || n > (uint64_t)(c->end - c->p) || n > INT32_MAX) return 0;
    sub->p = c->p;
    sub->end = c->p + n;
    c->p += n;
    return 1;
}

static int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0; /* overlong */
            if (c == 0xED && c1 > 0x9F) return 0; /* UTF-16 surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) return 0;
            if (c == 0xF0 && c1 < 0x90) return 0; /* overlong */
            if (c == 0xF4 && c1 > 0x8F) return 0; /* above U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------------ */
/* Pass 1: validation against the OTLP trace schema                                                  */

enum { F_UNKNOWN = 0, F_VARINT, F_I64, F_I32, F_STRING, F_BYTES, F_MSG };

typedef struct Schema Schema;
typedef struct {
    uint8_t type;
    const Schema *sub;
} FieldDef;
#define MAX_FIELD 16
struct Schema {
    const char *name;
    FieldDef f[MAX_FIELD + 1]; /* indexed by field number */
};

/* Field numbers from opentelemetry-proto common.proto, resource.proto and trace.proto. */
static Schema S_ANY, S_KV, S_ARRAY, S_KVLIST, S_SCOPE, S_ENTITY, S_RESOURCE, S_EVENT, S_LINK, S_STATUS,
    S_SPAN, S_SCOPE_SPANS, S_RESOURCE_SPANS, S_REQUEST;

static void init_schemas(void) {
    S_ANY.name = "AnyValue";
    S_ANY.f[1] = (FieldDef){F_STRING, NULL};
    S_ANY.f[2] = (FieldDef){F_VARINT, NULL};
    S_ANY.f[3] = (FieldDef){F_VARINT, NULL};
    S_ANY.f[4] = (FieldDef){F_I64, NULL};
    S_ANY.f[5] = (FieldDef){F_MSG, &S_ARRAY};
    S_ANY.f[6] = (FieldDef){F_MSG, &S_KVLIST};
    S_ANY.f[7] = (FieldDef){F_BYTES, NULL};
    S_ANY.f[8] = (FieldDef){F_VARINT, NULL};
    S_KV.name = "KeyValue";
    S_KV.f[1] = (FieldDef){F_STRING, NULL};
    S_KV.f[2] = (FieldDef){F_MSG, &S_ANY};
    S_KV.f[3] = (FieldDef){F_VARINT, NULL};
    S_ARRAY.name = "ArrayValue";
    S_ARRAY.f[1] = (FieldDef){F_MSG, &S_ANY};
    S_KVLIST.name = "KeyValueList";
    S_KVLIST.f[1] = (FieldDef){F_MSG, &S_KV};
    S_SCOPE.name = "InstrumentationScope";
    S_SCOPE.f[1] = (FieldDef){F_STRING, NULL};
    S_SCOPE.f[2] = (FieldDef){F_STRING, NULL};
    S_SCOPE.f[3] = (FieldDef){F_MSG, &S_KV};
    S_SCOPE.f[4] = (FieldDef){F_VARINT, NULL};
    S_ENTITY.name = "EntityRef";
    for (int i = 1; i <= 4; i++) S_ENTITY.f[i] = (FieldDef){F_STRING, NULL};
    S_RESOURCE.name = "Resource";
    S_RESOURCE.f[1] = (FieldDef){F_MSG, &S_KV};
    S_RESOURCE.f[2] = (FieldDef){F_VARINT, NULL};
    S_RESOURCE.f[3] = (FieldDef){F_MSG, &S_ENTITY};
    S_EVENT.name = "Span.Event";
    S_EVENT.f[1] = (FieldDef){F_I64, NULL};
    S_EVENT.f[2] = (FieldDef){F_STRING, NULL};
    S_EVENT.f[3] = (FieldDef){F_MSG, &S_KV};
    S_EVENT.f[4] = (FieldDef){F_VARINT, NULL};
    S_LINK.name = "Span.Link";
    S_LINK.f[1] = (FieldDef){F_BYTES, NULL};
    S_LINK.f[2] = (FieldDef){F_BYTES, NULL};
    S_LINK.f[3] = (FieldDef){F_STRING, NULL};
    S_LINK.f[4] = (FieldDef){F_MSG, &S_KV};
    S_LINK.f[5] = (FieldDef){F_VARINT, NULL};
    S_LINK.f[6] = (FieldDef){F_I32, NULL};
    S_STATUS.name = "Status";
    S_STATUS.f[2] = (FieldDef){F_STRING, NULL};
    S_STATUS.f[3] = (FieldDef){F_VARINT, NULL};
    S_SPAN.name = "Span";
    S_SPAN.f[1] = (FieldDef){F_BYTES, NULL};
    S_SPAN.f[2] = (FieldDef){F_BYTES, NULL};
    S_SPAN.f[3] = (FieldDef){F_STRING, NULL};
    S_SPAN.f[4] = (FieldDef){F_BYTES, NULL};
    S_SPAN.f[5] = (FieldDef){F_STRING, NULL};
    S_SPAN.f[6] = (FieldDef){F_VARINT, NULL};
    S_SPAN.f[7] = (FieldDef){F_I64, NULL};
    S_SPAN.f[8] = (FieldDef){F_I64, NULL};
    S_SPAN.f[9] = (FieldDef){F_MSG, &S_KV};
    S_SPAN.f[10] = (FieldDef){F_VARINT, NULL};
    S_SPAN.f[11] = (FieldDef){F_MSG, &S_EVENT};
    S_SPAN.f[12] = (FieldDef){F_VARINT, NULL};
    S_SPAN.f[13] = (FieldDef){F_MSG, &S_LINK};
    S_SPAN.f[14] = (FieldDef){F_VARINT, NULL};
    S_SPAN.f[15] = (FieldDef){F_MSG, &S_STATUS};
    S_SPAN.f[16] = (FieldDef){F_I32, NULL};
    S_SCOPE_SPANS.name = "ScopeSpans";
    S_SCOPE_SPANS.f[1] = (FieldDef){F_MSG, &S_SCOPE};
    S_SCOPE_SPANS.f[2] = (FieldDef){F_MSG, &S_SPAN};
    S_SCOPE_SPANS.f[3] = (FieldDef){F_STRING, NULL};
    S_RESOURCE_SPANS.name = "ResourceSpans";
    S_RESOURCE_SPANS.f[1] = (FieldDef){F_MSG, &S_RESOURCE};
    S_RESOURCE_SPANS.f[2] = (FieldDef){F_MSG, &S_SCOPE_SPANS};
    S_RESOURCE_SPANS.f[3] = (FieldDef){F_STRING, NULL};
    S_REQUEST.name = "ExportTraceServiceRequest";
    S_REQUEST.f[1] = (FieldDef){F_MSG, &S_RESOURCE_SPANS};
}

static const int WIRE_OF[] = {-1, WT_VARINT, WT_I64, WT_I32, WT_LEN, WT_LEN, WT_LEN};

typedef struct {
    const char *error; /* static text of the first problem found */
    const char *where; /* message type it was found in */
} Check;

static int fail(Check *k, const char *error, const char *where) {
    if (k->error == NULL) {
        k->error = error;
        k->where = where;
    }
    return 0;
}

static int skip_value(Check *k, Cur *c, uint32_t field, int wt, int depth, const char *where);

/* Skips the rest of a group started by (field, SGROUP), validating what it holds. */
static int skip_group(Check *k, Cur *c, uint32_t field, int depth, const char *where) {
    if (depth > MAX_DEPTH) return fail(k, "nesting too deep", where);
    while (c->p < c->end) {
        uint32_t f;
        int wt;
        if (!rd_tag(c, &f, &wt)) return fail(k, "malformed tag", where);
        if (wt == WT_EGROUP) {
            if (f != field) return fail(k, "mismatched end-group tag", where);
            return 1;
        }
        if (!skip_value(k, c, f, wt, depth + 1, where)) return 0;
    }
    return fail(k, "unterminated group", where);
}

static int skip_value(Check *k, Cur *c, uint32_t field, int wt, int depth, const char *where) {
    uint64_t v;
    Cur sub;
    switch (wt) {
    case WT_VARINT:
        return rd_varint(c, &v) ? 1 : fail(k, "malformed varint", where);
    case WT_I64:
        if (c->end - c->p < 8) return fail(k, "truncated fixed64", where);
        c->p += 8;
        return 1;
    case WT_I32:
        if (c->end - c->p < 4) return fail(k, "truncated fixed32", where);
        c->p += 4;
        return 1;
    case WT_LEN:
        return rd_len(c, &sub) ? 1 : fail(k, "length-delimited field runs past its message", where);
    case WT_SGROUP:
        return skip_group(k, c, field, depth, where);
    case WT_EGROUP:
        return fail(k, "unexpected end-group tag", where);
    default:
        return fail(k, "invalid wire type", where);
    }
}

/* Validates one message of type s held in c (already delimited). depth counts enclosing messages. */
static int validate(Check *k, const Schema *s, Cur c, int depth) {
    if (depth > MAX_DEPTH) return fail(k, "nesting too deep", s->name);
    while (c.p < c.end) {
        uint32_t f;
        int wt;
        if (!rd_tag(&c, &f, &wt)) return fail(k, "malformed tag", s->name);
        const FieldDef *d = f <= MAX_FIELD ? &s->f[f] : NULL;
        if (d == NULL || d->type == F_UNKNOWN || WIRE_OF[d->type] != wt) {
            if (!skip_value(k, &c, f, wt, depth, s->name)) return 0;
            continue;
        }
        uint64_t v;
        Cur sub;
        switch (d->type) {
        case F_VARINT:
            if (!rd_varint(&c, &v)) return fail(k, "malformed varint", s->name);
            break;
        case F_I64:
            if (c.end - c.p < 8) return fail(k, "truncated fixed64", s->name);
            c.p += 8;
            break;
        case F_I32:
            if (c.end - c.p < 4) return fail(k, "truncated fixed32", s->name);
            c.p += 4;
            break;
        case F_STRING:
            if (!rd_len(&c, &sub)) return fail(k, "length-delimited field runs past its message", s->name);
            if (!utf8_valid(sub.p, sub.end - sub.p)) return fail(k, "string field is not valid UTF-8", s->name);
            break;
        case F_BYTES:
            if (!rd_len(&c, &sub)) return fail(k, "length-delimited field runs past its message", s->name);
            break;
        case F_MSG:
            if (!rd_len(&c, &sub)) return fail(k, "length-delimited field runs past its message", s->name);
            if (!validate(k, d->sub, sub, depth + 1)) return 0;
            break;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------------ */
/* Pass 2: extraction (the input is known to be well formed; reads stay bounds-checked regardless)   */

/* Skips one field's value during extraction, groups included. */
static int skip(Cur *c, uint32_t field, int wt) {
    Check k = {NULL, NULL};
    return skip_value(&k, c, field, wt, 0, "");
}

/* Iterates the fields of a message: for (...; next_field(&c, &f, &wt);) */
static inline int next_field(Cur *c, uint32_t *f, int *wt) {
    return c->p < c->end && rd_tag(c, f, wt);
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A quick hash of short byte strings (attribute keys, names): length plus three 8-byte words. Collisions
 * only cost a comparison, so speed matters more than mixing quality. */
static inline uint64_t short_hash(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL;
    if (n >= 8) {
        h ^= load64(p);
        h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ULL;
        h ^= load64(p + n / 2 - 4);
        h = (h ^ (h >> 31)) * 0x94D049BB133111EBULL;
        h ^= load64(p + n - 8);
    } else {
        uint64_t v = 0;
        memcpy(&v, p, (size_t)n);
        h ^= v;
    }
    h = (h ^ (h >> 32)) * 0xD6E8FEB86659FD93ULL;
    return h ^ (h >> 32);
}

typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    const char *utf8;
    PyObject *key; /* the str the caller gave (strong reference) */
    int id;        /* index of the key's slot */
} KeyEntry;

/* The last KeyValue of a span carrying a wanted key; valid while gen equals the scanner's. An event
 * attribute's slot also records which of the span's wanted events set it (ev), so that the first event
 * carrying the attribute wins and, within that event, its last occurrence. */
typedef struct {
    uint32_t gen;
    uint32_t ev;
    Cur kv;
} Slot;

/* A wanted span event: its name and the attributes read from it, each with its slot id. */
typedef struct {
    const char *attr;
    Py_ssize_t len;
    int id;
} EventAttr;

typedef struct {
    const char *name;
    Py_ssize_t len;
    Py_ssize_t nattrs;
    EventAttr *attrs;
} EventSpec;

/* A step-kind rule of the mapper's program: the span carries key_id → present_kind, or its string
 * value is one of table's → that entry's kind. */
typedef struct {
    const char *utf8;
    Py_ssize_t len;
    int kind;
    PyObject *str; /* keeps utf8 alive */
} KindValue;

typedef struct {
    int key_id;
    int present_kind; /* -1: decided by the value */
    Py_ssize_t nvalues;
    KindValue *values;
} KindRule;

/* One typed read: the first usable value of keys (span slots first, then the resource's dict). */
typedef struct {
    int op;
    PyObject *field; /* borrowed from the program, which the scanner holds */
    PyObject *keys;  /* tuple of str, for the resource's dict */
    Py_ssize_t nkeys;
    int *key_ids;    /* -1 for a key the span cannot carry */
} PlanRead;

typedef struct {
    Py_ssize_t nreads;
    PlanRead *reads;
    int keep_attrs; /* spans of this kind still get their attribute dict */
} KindPlan;

#define MAX_KINDS 8

#define CACHE_SLOTS 4096
#define CACHE_MAX_LEN 64

typedef struct {
    uint64_t hash;
    PyObject *str;
} CacheEntry;

typedef struct {
    PyObject_HEAD
    KeyEntry *keys;
    Py_ssize_t key_mask; /* table size - 1 (a power of two) */
    Py_ssize_t nkeys;
    CacheEntry *cache;   /* short strings seen before: names, kinds and models repeat across spans */
    Py_ssize_t max_value; /* values encoded longer than this are not materialised */
    PyObject *oversized;  /* called as oversized(kind, memoryview) for them */
    PyObject *data;       /* during scan(): the request object and a memoryview of it (lazily) */
    PyObject *data_view;
    const uint8_t *data_base;
    int busy;             /* scan() keeps its state here, so it must not be re-entered */
    PyObject *errors;     /* during scan(): fields of typed reads that met a wrong type */
    /* Per-span slots, one per wanted key and then one per wanted event attribute (ids nkeys..nslots-1),
     * and the ids set in the current span in order. */
    Slot *slots;
    Py_ssize_t nslots;
    PyObject **id_keys;   /* key str by id (borrowed from keys, or from event_refs for event attributes) */
    int *set_ids;
    int nset;
    uint32_t gen;
    /* Wanted span events (a handful at most: found by a linear search). */
    Py_ssize_t nevents;
    EventSpec *events;
    PyObject *event_refs; /* keeps the event names, attribute keys and their slot keys alive */
    uint32_t event_no;    /* wanted events seen in the current span */
    /* The mapper's program (NULL program: every span goes to the mapper with its attribute dict). */
    PyObject *program;
    uint8_t *slow;        /* per key id: a span carrying it is left to the mapper */
    Py_ssize_t nrules;
    KindRule *rules;
    Py_ssize_t nkinds;
    PyObject *kinds[MAX_KINDS];
    KindPlan plans[MAX_KINDS];
} Scanner;

static KeyEntry *wanted_entry(Scanner *sc, const uint8_t *p, Py_ssize_t n) {
    uint64_t h = short_hash(p, n);
    for (Py_ssize_t i = (Py_ssize_t)(h & sc->key_mask);; i = (i + 1) & sc->key_mask) {
        KeyEntry *e = &sc->keys[i];
        if (e->key == NULL) return NULL;
        if (e->hash == h && e->len == n && memcmp(e->utf8, p, n) == 0) return e;
    }
}

static inline PyObject *wanted_key(Scanner *sc, const uint8_t *p, Py_ssize_t n) {
    KeyEntry *e = wanted_entry(sc, p, n);
    return e ? e->key : NULL;
}

/* A str for valid UTF-8 bytes; short ones come from (and go into) the cache. New reference. */
static PyObject *make_str(Scanner *sc, const uint8_t *p, Py_ssize_t n) {
    if (n == 0 || n > CACHE_MAX_LEN) return PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    uint64_t h = short_hash(p, n);
    CacheEntry *e = &sc->cache[h & (CACHE_SLOTS - 1)];
    if (e->str != NULL && e->hash == h) {
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(e->str, &len);
        if (u != NULL && len == n && memcmp(u, p, n) == 0) {
            Py_INCREF(e->str);
            return e->str;
        }
        PyErr_Clear();
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s == NULL) return NULL;
    Py_XSETREF(e->str, Py_NewRef(s));
    e->hash = h;
    return s;
}

static PyObject *make_hex(const uint8_t *p, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    PyObject *s = PyUnicode_New(2 * n, 127);
    if (s == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    return s;
}

enum { V_UNSET = 0, V_STR, V_BOOL, V_INT, V_DOUBLE, V_ARRAY, V_KVLIST, V_BYTES, V_STRINDEX };

/* An AnyValue being read; repeated occurrences merge as protobuf merges them (oneof: last member wins,
 * a repeated array or kvlist member concatenates). */
typedef struct {
    int kind;
    PyObject *value; /* NULL while unset */
} AnyState;

static int any_merge(Scanner *sc, AnyState *st, Cur c);

/* Whether (field, wire type) is a member of AnyValue's oneof; protobuf keeps anything else as an
 * unknown field, which changes nothing. */
static inline int any_member(uint32_t f, int wt) {
    switch (f) {
    case 2: case 3: case 8: return wt == WT_VARINT;
    case 4: return wt == WT_I64;
    case 1: case 5: case 6: case 7: return wt == WT_LEN;
    default: return 0;
    }
}

/* The value of a KeyValue (None when it has none), every occurrence merged. New reference or NULL. */
static PyObject *kv_value(Scanner *sc, Cur c) {
    AnyState st = {V_UNSET, NULL};
    uint32_t f;
    int wt;
    Cur sub;
    while (next_field(&c, &f, &wt)) {
        if (f == 2 && wt == WT_LEN) {
            if (!rd_len(&c, &sub) || !any_merge(sc, &st, sub)) {
                Py_XDECREF(st.value);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed AnyValue");
                return NULL;
            }
        } else if (!skip(&c, f, wt)) {
            Py_XDECREF(st.value);
            PyErr_SetString(PyExc_ValueError, "malformed KeyValue");
            return NULL;
        }
    }
    return st.value ? st.value : Py_NewRef(Py_None);
}

/* The last length-delimited occurrence of field in a message (protobuf: the last one wins), without
 * creating objects; out->p is NULL when there is none. Returns 0 when the message is malformed. */
static int last_field(Cur c, uint32_t field, Cur *out) {
    uint32_t f;
    int wt;
    out->p = out->end = NULL;
    while (next_field(&c, &f, &wt)) {
        if (f == field && wt == WT_LEN) {
            if (!rd_len(&c, out)) return 0;
        } else if (!skip(&c, f, wt)) {
            return 0;
        }
    }
    return 1;
}

/* KeyValue.key and KeyValue.value. */
static inline int kv_key(Cur c, Cur *key) { return last_field(c, 1, key); }
static inline int kv_last_value(Cur c, Cur *value) { return last_field(c, 2, value); }


/* KeyValue → (key, value). Returns 0 with an exception set. */
static int key_value(Scanner *sc, Cur c, PyObject **key, PyObject **value) {
    Cur kbytes;
    if (!kv_key(c, &kbytes)) {
        PyErr_SetString(PyExc_ValueError, "malformed KeyValue");
        return 0;
    }
    *key = kbytes.p ? make_str(sc, kbytes.p, kbytes.end - kbytes.p) : PyUnicode_FromStringAndSize("", 0);
    if (*key == NULL) return 0;
    *value = kv_value(sc, c);
    if (*value == NULL) {
        Py_CLEAR(*key);
        return 0;
    }
    return 1;
}

static void any_set(AnyState *st, int kind, PyObject *value) {
    Py_XSETREF(st->value, value);
    st->kind = kind;
}

static int any_merge(Scanner *sc, AnyState *st, Cur c) {
    uint32_t f;
    int wt;
    uint64_t v;
    Cur sub;
    while (next_field(&c, &f, &wt)) {
        PyObject *x = NULL;
        if (f == 1 && wt == WT_LEN) {
            if (!rd_len(&c, &sub) || !(x = make_str(sc, sub.p, sub.end - sub.p))) return 0;
            any_set(st, V_STR, x);
        } else if (f == 2 && wt == WT_VARINT) {
            if (!rd_varint(&c, &v)) return 0;
            any_set(st, V_BOOL, Py_NewRef(v ? Py_True : Py_False));
        } else if (f == 3 && wt == WT_VARINT) {
            if (!rd_varint(&c, &v) || !(x = PyLong_FromLongLong((long long)(int64_t)v))) return 0;
            any_set(st, V_INT, x);
        } else if (f == 4 && wt == WT_I64) {
            double d;
            if (c.end - c.p < 8) return 0;
            memcpy(&d, c.p, 8);
            c.p += 8;
            if (!(x = PyFloat_FromDouble(d))) return 0;
            any_set(st, V_DOUBLE, x);
        } else if (f == 5 && wt == WT_LEN) {
            if (!rd_len(&c, &sub)) return 0;
            if (st->kind != V_ARRAY) {
                if (!(x = PyList_New(0))) return 0;
                any_set(st, V_ARRAY, x);
            }
            uint32_t g;
            int gwt;
            while (next_field(&sub, &g, &gwt)) {
                Cur item;
                if (g == 1 && gwt == WT_LEN) {
                    AnyState inner = {V_UNSET, NULL};
                    if (!rd_len(&sub, &item) || !any_merge(sc, &inner, item)) {
                        Py_XDECREF(inner.value);
                        return 0;
                    }
                    PyObject *iv = inner.value ? inner.value : Py_NewRef(Py_None);
                    int rc = PyList_Append(st->value, iv);
                    Py_DECREF(iv);
                    if (rc < 0) return 0;
                } else if (!skip(&sub, g, gwt)) {
                    return 0;
                }
            }
        } else if (f == 6 && wt == WT_LEN) {
            if (!rd_len(&c, &sub)) return 0;
            if (st->kind != V_KVLIST) {
                if (!(x = PyDict_New())) return 0;
                any_set(st, V_KVLIST, x);
            }
            uint32_t g;
            int gwt;
            while (next_field(&sub, &g, &gwt)) {
                Cur item;
                if (g == 1 && gwt == WT_LEN) {
                    PyObject *k, *kv;
                    if (!rd_len(&sub, &item) || !key_value(sc, item, &k, &kv)) return 0;
                    int rc = PyDict_SetItem(st->value, k, kv);
                    Py_DECREF(k);
                    Py_DECREF(kv);
                    if (rc < 0) return 0;
                } else if (!skip(&sub, g, gwt)) {
                    return 0;
                }
            }
        } else if (f == 7 && wt == WT_LEN) {
            if (!rd_len(&c, &sub) ||
                !(x = PyBytes_FromStringAndSize((const char *)sub.p, sub.end - sub.p)))
                return 0;
            any_set(st, V_BYTES, x);
        } else if (f == 8 && wt == WT_VARINT) {
            /* string_value_strindex points into a dictionary that trace requests do not carry. */
            if (!rd_varint(&c, &v)) return 0;
            any_set(st, V_STRINDEX, NULL);
        } else if (!skip(&c, f, wt)) {
            return 0;
        }
    }
    return 1;
}

/* An oversized value's kind and raw bytes (a memoryview into the request, never a copy): the string's
 * UTF-8 bytes, the bytes value, or the ArrayValue / KeyValueList message. NULL with no exception set when
 * the value's last member is a scalar (then it is read normally). */
static PyObject *oversized(Scanner *sc, Cur any) {
    uint32_t f;
    int wt;
    Cur payload = {NULL, NULL};
    const char *kind = NULL;
    while (next_field(&any, &f, &wt)) {
        Cur sub;
        if (wt == WT_LEN && (f == 1 || f == 5 || f == 6 || f == 7)) {
            if (!rd_len(&any, &sub)) return NULL;
            payload = sub;
            kind = f == 1 ? "string" : f == 5 ? "array" : f == 6 ? "kvlist" : "bytes";
        } else {
            if (!skip(&any, f, wt)) return NULL;
            if (any_member(f, wt)) kind = NULL;  /* a scalar member replaced it */
        }
    }
    if (kind == NULL) return NULL;
    if (sc->data_view == NULL && !(sc->data_view = PyMemoryView_FromObject(sc->data))) return NULL;
    PyObject *raw = PySequence_GetSlice(sc->data_view, payload.p - sc->data_base, payload.end - sc->data_base);
    if (raw == NULL) return NULL;
    PyObject *out = PyObject_CallFunction(sc->oversized, "sN", kind, raw);
    return out;
}

/* A wanted attribute's value: an Oversized view when its last encoding is longer than max_value (and
 * is a string, bytes, array or kvlist), else the value with every occurrence merged. New reference. */
static PyObject *attr_value(Scanner *sc, Cur kv) {
    Cur last;
    if (kv_last_value(kv, &last) && last.p != NULL && last.end - last.p > sc->max_value) {
        PyObject *v = oversized(sc, last);
        if (v != NULL || PyErr_Occurred()) return v;
    }
    return kv_value(sc, kv);
}

/* Adds a KeyValue to *dict (created on first use) when its key is wanted. */
static int collect_attr(Scanner *sc, Cur kv, PyObject **dict) {
    Cur key;
    if (!kv_key(kv, &key)) return 0;
    PyObject *wanted = wanted_key(sc, key.p ? key.p : (const uint8_t *)"", key.end - key.p);
    if (wanted == NULL) return 1;
    PyObject *v = attr_value(sc, kv);
    if (v == NULL) return 0;
    if (*dict == NULL && !(*dict = PyDict_New())) {
        Py_DECREF(v);
        return 0;
    }
    int rc = PyDict_SetItem(*dict, wanted, v);
    Py_DECREF(v);
    return rc == 0;
}

/* Span attributes are not materialised while the span is walked: the last KeyValue of each wanted key
 * is remembered in its slot, and values are created only for what is read. */
static void new_span(Scanner *sc) {
    sc->nset = 0;
    sc->event_no = 0;
    if (++sc->gen == 0) { /* wrapped around: forget every slot */
        for (Py_ssize_t i = 0; i < sc->nslots; i++) sc->slots[i].gen = 0;
        sc->gen = 1;
    }
}

static int record_attr(Scanner *sc, Cur kv) {
    Cur key;
    if (!kv_key(kv, &key)) return 0;
    KeyEntry *e = wanted_entry(sc, key.p ? key.p : (const uint8_t *)"", key.end - key.p);
    if (e == NULL) return 1;
    Slot *slot = &sc->slots[e->id];
    if (slot->gen != sc->gen) {
        slot->gen = sc->gen;
        sc->set_ids[sc->nset++] = e->id;
    }
    slot->kv = kv; /* a repeated key: the last one wins, as in a protobuf map */
    return 1;
}

static inline Slot *slot_of(Scanner *sc, int id) {
    return id >= 0 && sc->slots[id].gen == sc->gen ? &sc->slots[id] : NULL;
}

/* The current span's wanted attributes as a dict, in the order their keys first appeared. */
static PyObject *slots_dict(Scanner *sc) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (int i = 0; i < sc->nset; i++) {
        int id = sc->set_ids[i];
        PyObject *v = attr_value(sc, sc->slots[id].kv);
        if (v == NULL || PyDict_SetItem(d, sc->id_keys[id], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

/* Whether a KeyValue's merged value is a string, and its bytes: the last oneof member decides. */
static int kv_final_string(Cur kv, Cur *out) {
    uint32_t f, g;
    int wt, gwt, is_str = 0;
    Cur any;
    while (next_field(&kv, &f, &wt)) {
        if (f == 2 && wt == WT_LEN) {
            if (!rd_len(&kv, &any)) return 0;
            while (next_field(&any, &g, &gwt)) {
                if (g == 1 && gwt == WT_LEN) {
                    if (!rd_len(&any, out)) return 0;
                    is_str = 1;
                } else {
                    if (!skip(&any, g, gwt)) return 0;
                    if (any_member(g, gwt)) is_str = 0;
                }
            }
        } else if (!skip(&kv, f, wt)) {
            return 0;
        }
    }
    return is_str;
}

/* The step kind the current span's attributes declare (index into sc->kinds), or -1 for none. */
static int decide_kind(Scanner *sc) {
    for (Py_ssize_t r = 0; r < sc->nrules; r++) {
        const KindRule *rule = &sc->rules[r];
        Slot *slot = slot_of(sc, rule->key_id);
        if (slot == NULL) continue;
        if (rule->present_kind >= 0) return rule->present_kind;
        Cur v;
        if (!kv_final_string(slot->kv, &v)) continue;
        Py_ssize_t n = v.end - v.p;
        for (Py_ssize_t i = 0; i < rule->nvalues; i++) {
            const KindValue *kv = &rule->values[i];
            if (kv->len == n && memcmp(kv->utf8, v.p, n) == 0) return kv->kind;
        }
    }
    return -1;
}

/* The string value of a KeyValue (or "" when it holds another type), merged as protobuf would. */
static int kv_string(Scanner *sc, Cur kv, PyObject **out) {
    PyObject *v = kv_value(sc, kv);
    if (v == NULL) return 0;
    if (PyUnicode_Check(v)) {
        Py_XSETREF(*out, v);
    } else {
        Py_DECREF(v);
        Py_XSETREF(*out, PyUnicode_FromStringAndSize("", 0));
    }
    return *out != NULL;
}

static int key_is(Cur key, const char *s) {
    size_t n = strlen(s);
    return key.p != NULL && (size_t)(key.end - key.p) == n && memcmp(key.p, s, n) == 0;
}

/* Resource → (wanted attributes or None, service.name, deployment.environment.name and the older
 * deployment.environment: env[0] and env[1], each NULL until seen). */
static int read_resource(Scanner *sc, Cur c, PyObject **attrs, PyObject **service, PyObject **env) {
    uint32_t f;
    int wt;
    while (next_field(&c, &f, &wt)) {
        Cur kv, key;
        if (f == 1 && wt == WT_LEN) {
            if (!rd_len(&c, &kv) || !collect_attr(sc, kv, attrs) || !kv_key(kv, &key)) return 0;
            if (key_is(key, "service.name") && !kv_string(sc, kv, service)) return 0;
            if (key_is(key, "deployment.environment.name") && !kv_string(sc, kv, &env[0])) return 0;
            if (key_is(key, "deployment.environment") && !kv_string(sc, kv, &env[1])) return 0;
        } else if (!skip(&c, f, wt)) {
            return 0;
        }
    }
    return 1;
}

/* The wanted event of this name, or NULL. */
static const EventSpec *wanted_event(Scanner *sc, Cur name) {
    Py_ssize_t n = name.end - name.p;
    for (Py_ssize_t i = 0; i < sc->nevents; i++) {
        const EventSpec *ev = &sc->events[i];
        if (ev->len == n && (n == 0 || memcmp(ev->name, name.p, n) == 0)) return ev;
    }
    return NULL;
}

/* Remembers the wanted attributes of a wanted event in their slots (no values are created here): a slot
 * already set by an earlier event of the span keeps that event's value. */
static int record_event(Scanner *sc, const EventSpec *ev, Cur c) {
    uint32_t f;
    int wt;
    Cur kv, key;
    sc->event_no++;
    while (next_field(&c, &f, &wt)) {
        if (!(f == 3 && wt == WT_LEN)) { /* Span.Event.attributes */
            if (!skip(&c, f, wt)) return 0;
            continue;
        }
        if (!rd_len(&c, &kv) || !kv_key(kv, &key)) return 0;
        Py_ssize_t n = key.end - key.p;
        for (Py_ssize_t i = 0; i < ev->nattrs; i++) {
            const EventAttr *a = &ev->attrs[i];
            if (a->len != n || (n > 0 && memcmp(a->attr, key.p, n) != 0)) continue;
            Slot *slot = &sc->slots[a->id];
            if (slot->gen != sc->gen) {
                slot->gen = sc->gen;
                slot->ev = sc->event_no;
                sc->set_ids[sc->nset++] = a->id;
            } else if (slot->ev != sc->event_no) {
                break; /* an earlier event carried it */
            }
            slot->kv = kv;
            break;
        }
    }
    return 1;
}

/* One span event: the type and message of the first "exception" event go to *exc (when still unset),
 * the wanted attributes of a wanted event to their slots; any other event is skipped. */
static int read_event(Scanner *sc, Cur c, PyObject **exc) {
    uint32_t f;
    int wt;
    Cur name, sub;
    if (!last_field(c, 2, &name)) return 0; /* Span.Event.name */
    if (sc->nevents > 0) {
        const EventSpec *ev = wanted_event(sc, name);
        if (ev != NULL && !record_event(sc, ev, c)) return 0;
    }
    if (*exc != NULL || !key_is(name, "exception")) return 1;
    PyObject *type = PyUnicode_FromStringAndSize("", 0), *message = Py_NewRef(type);
    while (type != NULL && message != NULL && next_field(&c, &f, &wt)) {
        Cur key;
        if (f == 3 && wt == WT_LEN) {
            if (!rd_len(&c, &sub) || !kv_key(sub, &key)) goto error;
            if (key_is(key, "exception.type") && !kv_string(sc, sub, &type)) goto error;
            if (key_is(key, "exception.message") && !kv_string(sc, sub, &message)) goto error;
        } else if (!skip(&c, f, wt)) {
            goto error;
        }
    }
    if (type == NULL || message == NULL) goto error;
    *exc = PyTuple_Pack(2, type, message);
    Py_DECREF(type);
    Py_DECREF(message);
    return *exc != NULL;
error:
    Py_XDECREF(type);
    Py_XDECREF(message);
    return 0;
}

typedef struct {
    Cur trace_id, span_id, parent_span_id, name, status_message;
    uint64_t start, end;
    int32_t status_code;
    PyObject *exc;
    /* the first link whose trace id (link_field 1) or span id (2) has a wrong length, and that length */
    int link_field;
    Py_ssize_t link_len;
} SpanFields;

static int all_zero(Cur c) {
    for (const uint8_t *p = c.p; p < c.end; p++) {
        if (*p) return 0;
    }
    return 1;
}

/* Why a span's ids are invalid (a new str), or NULL with no error set when they are valid: the rules and
 * reasons of otelloop.otlp.scan.id_problem, in its order. */
static PyObject *id_problem(const SpanFields *s) {
    Py_ssize_t tn = s->trace_id.end - s->trace_id.p, sn = s->span_id.end - s->span_id.p;
    Py_ssize_t pn = s->parent_span_id.end - s->parent_span_id.p;
    if (tn != 16) return PyUnicode_FromFormat("trace_id of %zd bytes", tn);
    if (all_zero(s->trace_id)) return PyUnicode_FromString("trace_id all zero");
    if (sn != 8) return PyUnicode_FromFormat("span_id of %zd bytes", sn);
    if (all_zero(s->span_id)) return PyUnicode_FromString("span_id all zero");
    if (pn != 0 && pn != 8) return PyUnicode_FromFormat("parent_span_id of %zd bytes", pn);
    if (s->link_field == 1) return PyUnicode_FromFormat("link trace_id of %zd bytes", s->link_len);
    if (s->link_field == 2) return PyUnicode_FromFormat("link span_id of %zd bytes", s->link_len);
    return NULL;
}

/* Notes the first link with an id of a wrong length (empty ids are absent ones). Returns 0 on a framing
 * error. */
static int check_link(SpanFields *s, Cur c) {
    Cur trace = {NULL, NULL}, span = {NULL, NULL}, sub;
    uint32_t f;
    int wt;
    while (next_field(&c, &f, &wt)) {
        if ((f == 1 || f == 2) && wt == WT_LEN) {
            if (!rd_len(&c, &sub)) return 0;
            if (f == 1) trace = sub; else span = sub;
        } else if (!skip(&c, f, wt)) {
            return 0;
        }
    }
    if (s->link_field) return 1;
    Py_ssize_t tn = trace.end - trace.p, sn = span.end - span.p;
    if (tn != 0 && tn != 16) {
        s->link_field = 1;
        s->link_len = tn;
    } else if (sn != 0 && sn != 8) {
        s->link_field = 2;
        s->link_len = sn;
    }
    return 1;
}

static PyObject *run_plan(Scanner *sc, const KindPlan *plan, PyObject *rattrs);

/* What the mapper gets of a span: (attributes or None, kind or None, reads or None) as new references,
 * or 0 with nothing set when the span cannot be a step. Returns -1 on error.
 *   - no program: the attribute dict; the mapper decides everything.
 *   - a span carrying a "slow" key: the attribute dict; the mapper decides everything.
 *   - otherwise the kind and the typed reads of that kind's plan are done here; the dict is made only
 *     for kinds that still need it (the node of a system step). */
static int map_attrs(Scanner *sc, int resource_wanted, PyObject *rattrs, PyObject **attrs, PyObject **kind,
                     PyObject **reads) {
    *attrs = *kind = *reads = NULL;
    if (sc->program == NULL) {
        if (sc->nset == 0 && !resource_wanted) return 0;
        if (sc->nset > 0 && !(*attrs = slots_dict(sc))) return -1;
        return 1;
    }
    if (sc->nset == 0) return 0; /* the kind is declared by the span's own attributes */
    for (int i = 0; i < sc->nset; i++) {
        if (sc->slow[sc->set_ids[i]]) return (*attrs = slots_dict(sc)) ? 1 : -1;
    }
    int k = decide_kind(sc);
    if (k < 0) return 0;
    if (!(*reads = run_plan(sc, &sc->plans[k], rattrs))) return -1;
    if (sc->plans[k].keep_attrs && !(*attrs = slots_dict(sc))) {
        Py_CLEAR(*reads);
        return -1;
    }
    *kind = Py_NewRef(sc->kinds[k]);
    return 1;
}

/* What the reader hands over of one span: a named record (a tuple, so that it compares equal to the
 * pure-Python reader's otelloop.otlp.scan.SpanInfo), read by attribute at the speed of an index. */
static PyStructSequence_Field span_info_fields[] = {
    {"resource", "index of the span's ResourceSpans in the request"},
    {"name", "span name"},
    {"trace_id", "trace id, hex"},
    {"span_id", "span id, hex"},
    {"start_ns", "start time, Unix nanoseconds"},
    {"end_ns", "end time, Unix nanoseconds"},
    {"status_code", "status code (2: error)"},
    {"status_message", "status message"},
    {"attributes", "the wanted attributes (and event attributes), or None"},
    {"exception", "(type, message) of the first \"exception\" event, or None"},
    {"kind", "step kind decided by the program, or None"},
    {"reads", "results of the kind's plan, or None"},
    {NULL, NULL},
};
#define SPAN_INFO_FIELDS 12

static PyStructSequence_Desc span_info_desc = {
    "otelloop._scan.SpanInfo", "What the reader hands over of one span (see otelloop.otlp.scan).",
    span_info_fields, SPAN_INFO_FIELDS,
};

static PyTypeObject SpanInfoType;

/* One span → a SpanInfo, or None when it cannot be an agent step (see map_attrs) or its ids are invalid
 * (then *problem is set to the reason). */
static PyObject *read_span(Scanner *sc, Cur c, Py_ssize_t r, int resource_wanted, PyObject *rattrs,
                           PyObject **last_trace, Cur *last_trace_bytes, PyObject **problem) {
    SpanFields s = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, 0, 0, 0, NULL, 0, 0};
    uint32_t f;
    int wt;
    Cur sub;
    PyObject *out = NULL, *attrs = NULL, *kind = NULL, *reads = NULL;
    new_span(sc);
    while (next_field(&c, &f, &wt)) {
        if (wt == WT_LEN && (f == 1 || f == 2 || f == 4 || f == 5 || f == 9 || f == 11 || f == 13 || f == 15)) {
            if (!rd_len(&c, &sub)) goto done;
            if (f == 1) {
                s.trace_id = sub;
            } else if (f == 2) {
                s.span_id = sub;
            } else if (f == 4) {
                s.parent_span_id = sub;
            } else if (f == 13) {
                if (!check_link(&s, sub)) goto done;
            } else if (f == 5) {
                s.name = sub;
            } else if (f == 9) {
                if (!record_attr(sc, sub)) goto done;
            } else if (f == 11) {
                if ((s.exc == NULL || sc->nevents > 0) && !read_event(sc, sub, &s.exc)) goto done;
            } else {
                uint32_t g;
                int gwt;
                uint64_t v;
                while (next_field(&sub, &g, &gwt)) {
                    if (g == 2 && gwt == WT_LEN) {
                        if (!rd_len(&sub, &s.status_message)) goto done;
                    } else if (g == 3 && gwt == WT_VARINT) {
                        if (!rd_varint(&sub, &v)) goto done;
                        s.status_code = (int32_t)(uint32_t)v;
                    } else if (!skip(&sub, g, gwt)) {
                        goto done;
                    }
                }
            }
        } else if ((f == 7 || f == 8) && wt == WT_I64) {
            if (c.end - c.p < 8) goto done;
            uint64_t t;
            memcpy(&t, c.p, 8);
            c.p += 8;
            if (f == 7) s.start = t; else s.end = t;
        } else if (!skip(&c, f, wt)) {
            goto done;
        }
    }
    *problem = id_problem(&s);
    if (*problem != NULL) {
        out = Py_NewRef(Py_None); /* refused: not mapped */
        goto done;
    }
    if (PyErr_Occurred()) goto done;
    int mapped = map_attrs(sc, resource_wanted, rattrs, &attrs, &kind, &reads);
    if (mapped < 0) goto done;
    if (mapped == 0) {
        /* Not an agent step: nothing the mapper reads. Counted, not materialised. */
        out = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *trace;
    Py_ssize_t tn = s.trace_id.end - s.trace_id.p;
    if (*last_trace != NULL && last_trace_bytes->end - last_trace_bytes->p == tn &&
        (tn == 0 || memcmp(last_trace_bytes->p, s.trace_id.p, tn) == 0)) {
        trace = Py_NewRef(*last_trace);
    } else {
        trace = make_hex(s.trace_id.p, tn);
        if (trace == NULL) goto done;
        Py_XSETREF(*last_trace, Py_NewRef(trace));
        *last_trace_bytes = s.trace_id;
    }
    out = PyStructSequence_New(&SpanInfoType);
    if (out == NULL) {
        Py_DECREF(trace);
        goto done;
    }
    PyObject *items[SPAN_INFO_FIELDS] = {
        PyLong_FromSsize_t(r),
        s.name.p ? make_str(sc, s.name.p, s.name.end - s.name.p) : PyUnicode_FromStringAndSize("", 0),
        trace,
        make_hex(s.span_id.p, s.span_id.end - s.span_id.p),
        PyLong_FromUnsignedLongLong(s.start),
        PyLong_FromUnsignedLongLong(s.end),
        PyLong_FromLong(s.status_code),
        s.status_message.p ? make_str(sc, s.status_message.p, s.status_message.end - s.status_message.p)
                           : PyUnicode_FromStringAndSize("", 0),
        Py_NewRef(attrs ? attrs : Py_None),
        Py_NewRef(s.exc ? s.exc : Py_None),
        Py_NewRef(kind ? kind : Py_None),
        Py_NewRef(reads ? reads : Py_None),
    };
    int ok = 1;
    for (int i = 0; i < SPAN_INFO_FIELDS; i++) {
        if (items[i] == NULL) ok = 0;
        PyStructSequence_SET_ITEM(out, i, items[i]);
    }
    if (!ok) Py_CLEAR(out); /* the dealloc skips the NULL slots */
done:
    Py_XDECREF(attrs);
    Py_XDECREF(kind);
    Py_XDECREF(reads);
    Py_XDECREF(s.exc);
    return out;
}

/* ------------------------------------------------------------------------------------------------ */
/* Scanner type                                                                                      */

static PyObject *raise_invalid(Check *k) {
    PyErr_Format(PyExc_ValueError, "%s (in %s)", k->error, k->where);
    return NULL;
}

static int get_buffer(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

/* Scanner.scan(data) -> (resources, spans, errors, invalid); see the module docstring of otelloop.otlp.scan. */
static PyObject *Scanner_scan(Scanner *sc, PyObject *arg) {
    if (sc->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner is not initialised");
        return NULL;
    }
    if (sc->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner.scan() is already running (use one Scanner per thread)");
        return NULL;
    }
    Py_buffer buf;
    if (get_buffer(arg, &buf) < 0) return NULL;
    Check k = {NULL, NULL};
    Cur c = {buf.buf, (const uint8_t *)buf.buf + buf.len};
    PyObject *resources = NULL, *spans = NULL, *invalid = NULL, *result = NULL, *last_trace = NULL;
    Cur last_trace_bytes = {NULL, NULL};
    sc->busy = 1;
    sc->data = arg;
    sc->data_base = c.p;
    if (!validate(&k, &S_REQUEST, c, 0)) {
        raise_invalid(&k);
        goto done;
    }
    if (!(resources = PyList_New(0)) || !(spans = PyList_New(0)) || !(invalid = PyList_New(0)) ||
        !(sc->errors = PyList_New(0))) goto done;
    uint32_t f;
    int wt;
    Cur rs;
    Py_ssize_t r = 0;
    while (next_field(&c, &f, &wt)) {
        if (!(f == 1 && wt == WT_LEN)) {
            if (!skip(&c, f, wt)) goto malformed;
            continue;
        }
        if (!rd_len(&c, &rs)) goto malformed;
        /* The resource first, wherever it sits: spans need to know whether it carries wanted keys. */
        PyObject *rattrs = NULL, *service = PyUnicode_FromStringAndSize("", 0), *env[2] = {NULL, NULL};
        if (service == NULL) goto done;
        Cur walk = rs, sub;
        uint32_t g;
        int gwt;
        while (next_field(&walk, &g, &gwt)) {
            if (g == 1 && gwt == WT_LEN) {
                if (!rd_len(&walk, &sub) || !read_resource(sc, sub, &rattrs, &service, env)) {
                    Py_XDECREF(rattrs);
                    Py_DECREF(service);
                    Py_XDECREF(env[0]);
                    Py_XDECREF(env[1]);
                    goto malformed;
                }
            } else if (!skip(&walk, g, gwt)) {
                Py_XDECREF(rattrs);
                Py_DECREF(service);
                Py_XDECREF(env[0]);
                Py_XDECREF(env[1]);
                goto malformed;
            }
        }
        /* The environment: deployment.environment.name, or the older deployment.environment when it
         * names none (semantic conventions 1.27 renamed the attribute). */
        PyObject *environment = env[0] != NULL && PyUnicode_GET_LENGTH(env[0]) > 0 ? env[0] : env[1];
        environment = environment != NULL ? Py_NewRef(environment) : PyUnicode_FromStringAndSize("", 0);
        Py_XDECREF(env[0]);
        Py_XDECREF(env[1]);
        if (environment == NULL) {
            Py_XDECREF(rattrs);
            Py_DECREF(service);
            goto done;
        }
        int resource_wanted = rattrs != NULL;
        PyObject *rdict = rattrs; /* borrowed once entry holds it */
        PyObject *entry = Py_BuildValue("(NNN)", rattrs ? rattrs : Py_NewRef(Py_None), service, environment);
        if (entry == NULL || PyList_Append(resources, entry) < 0) {
            Py_XDECREF(entry);
            goto done;
        }
        Py_DECREF(entry);
        walk = rs;
        while (next_field(&walk, &g, &gwt)) {
            Cur ss;
            if (!(g == 2 && gwt == WT_LEN)) {
                if (!skip(&walk, g, gwt)) goto malformed;
                continue;
            }
            if (!rd_len(&walk, &ss)) goto malformed;
            uint32_t h;
            int hwt;
            while (next_field(&ss, &h, &hwt)) {
                Cur span;
                if (!(h == 2 && hwt == WT_LEN)) {
                    if (!skip(&ss, h, hwt)) goto malformed;
                    continue;
                }
                if (!rd_len(&ss, &span)) goto malformed;
                PyObject *problem = NULL;
                PyObject *item = read_span(sc, span, r, resource_wanted, rdict, &last_trace, &last_trace_bytes,
                                           &problem);
                if (item == NULL) goto malformed;
                if (problem != NULL) {
                    PyObject *entry = Py_BuildValue("(nN)", PyList_GET_SIZE(spans), problem);
                    if (entry == NULL || PyList_Append(invalid, entry) < 0) {
                        Py_XDECREF(entry);
                        Py_DECREF(item);
                        goto done;
                    }
                    Py_DECREF(entry);
                }
                int rc = PyList_Append(spans, item);
                Py_DECREF(item);
                if (rc < 0) goto done;
            }
        }
        r++;
    }
    result = PyTuple_Pack(4, resources, spans, sc->errors, invalid);
    goto done;
malformed:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed request");
done:
    Py_XDECREF(resources);
    Py_XDECREF(spans);
    Py_XDECREF(invalid);
    Py_XDECREF(last_trace);
    if (sc->data_view != NULL) {
        /* Slices handed out keep the request's buffer alive on their own. */
        PyObject *view = sc->data_view;
        sc->data_view = NULL;
        Py_DECREF(view);
    }
    sc->data = NULL;
    Py_CLEAR(sc->errors);
    sc->busy = 0;
    PyBuffer_Release(&buf);
    return result;
}

static void free_program(Scanner *sc) {
    for (Py_ssize_t r = 0; r < sc->nrules; r++) {
        for (Py_ssize_t i = 0; i < sc->rules[r].nvalues; i++) Py_XDECREF(sc->rules[r].values[i].str);
        PyMem_Free(sc->rules[r].values);
    }
    PyMem_Free(sc->rules);
    sc->rules = NULL;
    sc->nrules = 0;
    for (Py_ssize_t k = 0; k < MAX_KINDS; k++) {
        KindPlan *plan = &sc->plans[k];
        for (Py_ssize_t i = 0; i < plan->nreads; i++) {
            Py_XDECREF(plan->reads[i].field);
            Py_XDECREF(plan->reads[i].keys);
            PyMem_Free(plan->reads[i].key_ids);
        }
        PyMem_Free(plan->reads);
        *plan = (KindPlan){0, NULL, 0};
        Py_CLEAR(sc->kinds[k]);
    }
    sc->nkinds = 0;
    PyMem_Free(sc->slow);
    sc->slow = NULL;
    Py_CLEAR(sc->program);
}

static void free_events(Scanner *sc) {
    for (Py_ssize_t i = 0; i < sc->nevents; i++) PyMem_Free(sc->events[i].attrs);
    PyMem_Free(sc->events);
    sc->events = NULL;
    sc->nevents = 0;
    Py_CLEAR(sc->event_refs);
}

static void Scanner_dealloc(Scanner *sc) {
    free_program(sc);
    if (sc->keys != NULL) {
        for (Py_ssize_t i = 0; i <= sc->key_mask; i++) Py_XDECREF(sc->keys[i].key);
        PyMem_Free(sc->keys);
    }
    if (sc->cache != NULL) {
        for (Py_ssize_t i = 0; i < CACHE_SLOTS; i++) Py_XDECREF(sc->cache[i].str);
        PyMem_Free(sc->cache);
    }
    PyMem_Free(sc->slots);
    PyMem_Free(sc->id_keys);
    PyMem_Free(sc->set_ids);
    free_events(sc);
    Py_XDECREF(sc->oversized);
    Py_TYPE(sc)->tp_free((PyObject *)sc);
}

/* The slot id of a key (an attribute key, or the key of a wanted event attribute), -1 when it is not
 * wanted, -2 on error. */
static int key_id_of(Scanner *sc, PyObject *key) {
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "program keys must be str");
        return -2;
    }
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(key, &n);
    if (u == NULL) return -2;
    KeyEntry *e = wanted_entry(sc, (const uint8_t *)u, n);
    if (e != NULL) return e->id;
    for (Py_ssize_t id = sc->nkeys; id < sc->nslots; id++) {
        int cmp = PyUnicode_Compare(sc->id_keys[id], key);
        if (cmp == 0) return (int)id;
        if (cmp == -1 && PyErr_Occurred()) return -2;
    }
    return -1;
}

/* events = [(key, event name, attribute), ...]: the event attributes to hand over under key. Slots get
 * ids from nkeys on, in the order given; an event name's attributes are grouped under it. */
static int load_events(Scanner *sc, PyObject *seq) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (!(sc->event_refs = PyList_New(0))) return 0;
    if (n == 0) return 1;
    if (!(sc->events = PyMem_Calloc(n, sizeof(EventSpec)))) return PyErr_NoMemory(), 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *key, *name, *attr;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "UUU", &key, &name, &attr)) {
            PyErr_SetString(PyExc_TypeError, "events are (key, event name, attribute) tuples of str");
            return 0;
        }
        int known = key_id_of(sc, key);
        if (known == -2) return 0;
        if (known >= 0 && known < sc->nkeys) {
            PyErr_Format(PyExc_ValueError, "event key %R is also an attribute key", key);
            return 0;
        }
        if (known >= 0) continue; /* given twice */
        if (PyList_Append(sc->event_refs, key) < 0 || PyList_Append(sc->event_refs, name) < 0 ||
            PyList_Append(sc->event_refs, attr) < 0)
            return 0;
        Py_ssize_t name_len, attr_len;
        const char *name_u = PyUnicode_AsUTF8AndSize(name, &name_len);
        const char *attr_u = PyUnicode_AsUTF8AndSize(attr, &attr_len);
        if (name_u == NULL || attr_u == NULL) return 0;
        EventSpec *ev = NULL;
        for (Py_ssize_t j = 0; j < sc->nevents; j++) {
            if (sc->events[j].len == name_len && memcmp(sc->events[j].name, name_u, name_len) == 0) {
                ev = &sc->events[j];
                break;
            }
        }
        if (ev == NULL) {
            ev = &sc->events[sc->nevents++];
            ev->name = name_u;
            ev->len = name_len;
            if (!(ev->attrs = PyMem_Calloc(n, sizeof(EventAttr)))) return PyErr_NoMemory(), 0;
        }
        int id = (int)sc->nslots++;
        ev->attrs[ev->nattrs++] = (EventAttr){attr_u, attr_len, id};
        sc->id_keys[id] = key;
    }
    return 1;
}

/* The index of a step kind in sc->kinds, added on first sight; -1 on error. */
static int kind_index(Scanner *sc, PyObject *kind) {
    if (!PyUnicode_Check(kind)) {
        PyErr_SetString(PyExc_TypeError, "step kinds must be str");
        return -1;
    }
    for (Py_ssize_t i = 0; i < sc->nkinds; i++) {
        int cmp = PyUnicode_Compare(sc->kinds[i], kind);
        if (cmp == 0) return (int)i;
        if (cmp == -1 && PyErr_Occurred()) return -1;
    }
    if (sc->nkinds == MAX_KINDS) {
        PyErr_SetString(PyExc_ValueError, "too many step kinds");
        return -1;
    }
    sc->kinds[sc->nkinds] = Py_NewRef(kind);
    return (int)sc->nkinds++;
}

static int load_rule(Scanner *sc, PyObject *item, KindRule *rule) {
    PyObject *key, *table, *present;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OOO", &key, &table, &present)) {
        PyErr_SetString(PyExc_TypeError, "kind rules are (key, {value: kind} or None, kind or None)");
        return 0;
    }
    if ((rule->key_id = key_id_of(sc, key)) == -2) return 0;
    rule->present_kind = -1;
    if (present != Py_None) return (rule->present_kind = kind_index(sc, present)) >= 0;
    if (!PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "a kind rule without a kind needs a {value: kind} table");
        return 0;
    }
    rule->values = PyMem_Calloc(PyDict_GET_SIZE(table) + 1, sizeof(KindValue));
    if (rule->values == NULL) return PyErr_NoMemory(), 0;
    Py_ssize_t pos = 0;
    PyObject *value, *kind;
    while (PyDict_Next(table, &pos, &value, &kind)) {
        KindValue *kv = &rule->values[rule->nvalues];
        if (!PyUnicode_Check(value) || PyUnicode_GET_LENGTH(value) == 0) {
            PyErr_SetString(PyExc_ValueError, "kind table values must be non-empty str");
            return 0;
        }
        if (!(kv->utf8 = PyUnicode_AsUTF8AndSize(value, &kv->len)) || (kv->kind = kind_index(sc, kind)) < 0)
            return 0;
        kv->str = Py_NewRef(value);
        rule->nvalues++;
    }
    return 1;
}

static int load_plan(Scanner *sc, PyObject *kind, PyObject *plan) {
    int k = kind_index(sc, kind);
    if (k < 0) return 0;
    KindPlan *kp = &sc->plans[k];
    if (!PyTuple_Check(plan)) {
        PyErr_SetString(PyExc_TypeError, "plans are tuples of (op, keys tuple, field)");
        return 0;
    }
    kp->reads = PyMem_Calloc(PyTuple_GET_SIZE(plan) + 1, sizeof(PlanRead));
    if (kp->reads == NULL) return PyErr_NoMemory(), 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plan); i++) {
        PyObject *read = PyTuple_GET_ITEM(plan, i), *keys, *field;
        PlanRead *pr = &kp->reads[i];
        if (!PyTuple_Check(read) || !PyArg_ParseTuple(read, "iO!O", &pr->op, &PyTuple_Type, &keys, &field)) {
            PyErr_SetString(PyExc_TypeError, "plan items are (op, keys tuple, field)");
            return 0;
        }
        kp->nreads++;
        pr->keys = Py_NewRef(keys);
        pr->field = Py_NewRef(field);
        pr->nkeys = PyTuple_GET_SIZE(keys);
        if (!(pr->key_ids = PyMem_Calloc(pr->nkeys + 1, sizeof(int)))) return PyErr_NoMemory(), 0;
        for (Py_ssize_t j = 0; j < pr->nkeys; j++) {
            if ((pr->key_ids[j] = key_id_of(sc, PyTuple_GET_ITEM(keys, j))) == -2) return 0;
        }
    }
    return 1;
}

/* program = (slow keys, kind rules, {kind: plan}, kinds that keep their attribute dict); see
 * otelloop.mapping.program. */
static int load_program(Scanner *sc, PyObject *program) {
    PyObject *slow, *rules, *plans, *keep, *item;
    if (!PyTuple_Check(program) || !PyArg_ParseTuple(program, "OOO!O", &slow, &rules, &PyDict_Type, &plans, &keep)) {
        PyErr_SetString(PyExc_TypeError, "program is (slow keys, kind rules, {kind: plan}, kinds keeping attributes)");
        return 0;
    }
    sc->program = Py_NewRef(program);
    if (!(sc->slow = PyMem_Calloc(sc->nslots + 1, 1))) return PyErr_NoMemory(), 0;
    PyObject *it = PyObject_GetIter(slow);
    if (it == NULL) return 0;
    while ((item = PyIter_Next(it)) != NULL) {
        int id = key_id_of(sc, item);
        Py_DECREF(item);
        if (id == -2) break;
        if (id >= 0) sc->slow[id] = 1;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return 0;
    PyObject *seq = PySequence_Fast(rules, "kind rules must be a sequence");
    if (seq == NULL) return 0;
    sc->rules = PyMem_Calloc(PySequence_Fast_GET_SIZE(seq) + 1, sizeof(KindRule));
    if (sc->rules == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory(), 0;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        sc->nrules++;
        if (!load_rule(sc, PySequence_Fast_GET_ITEM(seq, i), &sc->rules[i])) {
            Py_DECREF(seq);
            return 0;
        }
    }
    Py_DECREF(seq);
    Py_ssize_t pos = 0;
    PyObject *kind, *plan;
    while (PyDict_Next(plans, &pos, &kind, &plan)) {
        if (!load_plan(sc, kind, plan)) return 0;
    }
    if (!(it = PyObject_GetIter(keep))) return 0;
    while ((item = PyIter_Next(it)) != NULL) {
        int k = kind_index(sc, item);
        Py_DECREF(item);
        if (k < 0) break;
        sc->plans[k].keep_attrs = 1;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return 0;
    for (Py_ssize_t k = 0; k < sc->nkinds; k++) {
        if (sc->plans[k].reads == NULL) {
            PyErr_Format(PyExc_ValueError, "no plan for step kind %R", sc->kinds[k]);
            return 0;
        }
    }
    return 1;
}

static int Scanner_init(Scanner *sc, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"keys", "max_value_bytes", "oversized", "program", "events", NULL};
    PyObject *keys_arg, *factory, *program = Py_None, *events_arg = NULL;
    Py_ssize_t max_value;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnO|OO", kwlist, &keys_arg, &max_value, &factory, &program,
                                     &events_arg))
        return -1;
    if (sc->keys != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner is already initialised");
        return -1;
    }
    PyObject *events = events_arg ? PySequence_Fast(events_arg, "events must be a sequence") : PyTuple_New(0);
    if (events == NULL) return -1;
    PyObject *keys = PySequence_List(keys_arg);
    if (keys == NULL) {
        Py_DECREF(events);
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys), size = 8, m = PySequence_Fast_GET_SIZE(events);
    while (size < 2 * n + 2) size <<= 1;
    sc->keys = PyMem_Calloc(size, sizeof(KeyEntry));
    sc->cache = PyMem_Calloc(CACHE_SLOTS, sizeof(CacheEntry));
    sc->slots = PyMem_Calloc(n + m + 1, sizeof(Slot));
    sc->id_keys = PyMem_Calloc(n + m + 1, sizeof(PyObject *));
    sc->set_ids = PyMem_Calloc(n + m + 1, sizeof(int));
    if (sc->keys == NULL || sc->cache == NULL || sc->slots == NULL || sc->id_keys == NULL || sc->set_ids == NULL) {
        Py_DECREF(keys);
        Py_DECREF(events);
        PyErr_NoMemory();
        return -1;
    }
    sc->key_mask = size - 1;
    sc->max_value = max_value;
    sc->gen = 1;
    sc->oversized = Py_NewRef(factory);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *key = PyList_GET_ITEM(keys, j);
        if (!PyUnicode_Check(key)) {
            Py_DECREF(keys);
            Py_DECREF(events);
            PyErr_SetString(PyExc_TypeError, "attribute keys must be str");
            return -1;
        }
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(key, &len);
        if (u == NULL) {
            Py_DECREF(keys);
            Py_DECREF(events);
            return -1;
        }
        if (wanted_key(sc, (const uint8_t *)u, len) != NULL) continue;
        uint64_t h = short_hash((const uint8_t *)u, len);
        Py_ssize_t i = (Py_ssize_t)(h & sc->key_mask);
        while (sc->keys[i].key != NULL) i = (i + 1) & sc->key_mask;
        sc->keys[i] = (KeyEntry){h, len, u, Py_NewRef(key), (int)sc->nkeys};
        sc->id_keys[sc->nkeys] = key;
        sc->nkeys++;
    }
    Py_DECREF(keys);
    sc->nslots = sc->nkeys;
    int loaded = load_events(sc, events);
    Py_DECREF(events);
    if (!loaded) return -1;
    if (program != Py_None && !load_program(sc, program)) {
        free_program(sc);
        return -1;
    }
    return 0;
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(data) -> (resources, spans, mapping errors): validate a request and extract what the mapper reads."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "otelloop._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(keys, max_value_bytes, oversized, program=None, events=()): reads OTLP trace requests, "
              "keeping the attributes named in keys and the event attributes named in events ((key, event name, "
              "attribute) tuples); values encoded longer than max_value_bytes become oversized(kind, memoryview).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

/* ------------------------------------------------------------------------------------------------ */
/* Splicing                                                                                          */

static Py_ssize_t varint_size(uint64_t n) {
    Py_ssize_t s = 1;
    while (n > 0x7F) {
        n >>= 7;
        s++;
    }
    return s;
}

static uint8_t *put_varint(uint8_t *out, uint64_t n) {
    while (n > 0x7F) {
        *out++ = (uint8_t)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *out++ = (uint8_t)n;
    return out;
}

typedef struct {
    PyObject *extras;   /* list: None or bytes per span, in scan order */
    Py_ssize_t nextras;
    Py_ssize_t span;    /* running span index */
    Py_ssize_t *sizes;  /* new content size of each container, in visiting order */
    Py_ssize_t nsizes, cap;
} Splice;

static int push_size(Splice *sp, Py_ssize_t *slot_out) {
    if (sp->nsizes == sp->cap) {
        Py_ssize_t cap = sp->cap ? 2 * sp->cap : 64;
        Py_ssize_t *sizes = PyMem_Realloc(sp->sizes, cap * sizeof(Py_ssize_t));
        if (sizes == NULL) return 0;
        sp->sizes = sizes;
        sp->cap = cap;
    }
    *slot_out = sp->nsizes++;
    return 1;
}

static Py_ssize_t extra_len(Splice *sp, Py_ssize_t i) {
    if (i >= sp->nextras) return 0;
    PyObject *x = PyList_GET_ITEM(sp->extras, i);
    return x == Py_None ? 0 : PyBytes_GET_SIZE(x);
}

/* Size pass: the new content size of a message at level 0 (request), 1 (ResourceSpans) or 2
 * (ScopeSpans); containers are numbered in visiting order. Returns -1 on malformed input. */
static Py_ssize_t size_pass(Splice *sp, Cur c, int level) {
    Py_ssize_t slot = -1, total = 0;
    if (level > 0 && !push_size(sp, &slot)) return -1;
    uint32_t f;
    int wt;
    while (c.p < c.end) {
        const uint8_t *start = c.p;
        if (!rd_tag(&c, &f, &wt)) return -1;
        int child = (level == 0 && f == 1) || (level >= 1 && f == 2);
        if (child && wt == WT_LEN) {
            Cur sub;
            const uint8_t *len_at = c.p;
            if (!rd_len(&c, &sub)) return -1;
            Py_ssize_t old = sub.end - sub.p, now;
            if (level == 2) {
                now = old + extra_len(sp, sp->span++);
            } else {
                now = size_pass(sp, sub, level + 1);
                if (now < 0) return -1;
            }
            total += (len_at - start) + (now == old ? (sub.p - len_at) : varint_size(now)) + now;
        } else {
            if (!skip(&c, f, wt)) return -1;
            total += c.p - start;
        }
    }
    if (slot >= 0) sp->sizes[slot] = total;
    return total;
}

static uint8_t *write_pass(Splice *sp, Cur c, int level, uint8_t *out, Py_ssize_t *slot) {
    uint32_t f;
    int wt;
    while (c.p < c.end) {
        const uint8_t *start = c.p;
        if (!rd_tag(&c, &f, &wt)) return NULL;
        int child = (level == 0 && f == 1) || (level >= 1 && f == 2);
        if (child && wt == WT_LEN) {
            Cur sub;
            const uint8_t *len_at = c.p;
            if (!rd_len(&c, &sub)) return NULL;
            Py_ssize_t old = sub.end - sub.p;
            memcpy(out, start, len_at - start);
            out += len_at - start;
            if (level == 2) {
                Py_ssize_t i = sp->span++;
                Py_ssize_t extra = extra_len(sp, i);
                if (extra == 0) {
                    memcpy(out, len_at, sub.end - len_at);
                    out += sub.end - len_at;
                } else {
                    out = put_varint(out, (uint64_t)(old + extra));
                    memcpy(out, sub.p, old);
                    out += old;
                    memcpy(out, PyBytes_AS_STRING(PyList_GET_ITEM(sp->extras, i)), extra);
                    out += extra;
                }
            } else {
                Py_ssize_t now = sp->sizes[(*slot)++];
                if (now == old) {
                    memcpy(out, len_at, sub.p - len_at);
                    out += sub.p - len_at;
                } else {
                    out = put_varint(out, (uint64_t)now);
                }
                out = write_pass(sp, sub, level + 1, out, slot);
                if (out == NULL) return NULL;
            }
        } else {
            if (!skip(&c, f, wt)) return NULL;
            memcpy(out, start, c.p - start);
            out += c.p - start;
        }
    }
    return out;
}

/* splice(data, extras) -> bytes: extras[i] (bytes or None) is appended to the i-th span. */
static PyObject *splice(PyObject *self, PyObject *args) {
    PyObject *data, *extras;
    if (!PyArg_ParseTuple(args, "SO!", &data, &PyList_Type, &extras)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(extras);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(extras, i);
        if (x != Py_None && !PyBytes_Check(x)) {
            PyErr_SetString(PyExc_TypeError, "extras must hold bytes or None");
            return NULL;
        }
    }
    Splice sp = {extras, n, 0, NULL, 0, 0};
    Cur c = {(const uint8_t *)PyBytes_AS_STRING(data),
             (const uint8_t *)PyBytes_AS_STRING(data) + PyBytes_GET_SIZE(data)};
    Py_ssize_t total = size_pass(&sp, c, 0);
    PyObject *out = NULL;
    if (total < 0) {
        PyErr_SetString(PyExc_ValueError, "malformed request");
        goto done;
    }
    if (sp.span != n) {
        PyErr_Format(PyExc_ValueError, "request has %zd spans, %zd extras given", sp.span, n);
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    sp.span = 0;
    Py_ssize_t slot = 0;
    uint8_t *end = write_pass(&sp, c, 0, (uint8_t *)PyBytes_AS_STRING(out), &slot);
    if (end != (uint8_t *)PyBytes_AS_STRING(out) + total) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_RuntimeError, "splice size mismatch");
    }
done:
    PyMem_Free(sp.sizes);
    return out;
}

/* span_bytes(data) -> list[bytes]: each span's serialised bytes, in scan order. */
static PyObject *span_bytes(PyObject *self, PyObject *arg) {
    Py_buffer buf;
    if (get_buffer(arg, &buf) < 0) return NULL;
    Cur c = {buf.buf, (const uint8_t *)buf.buf + buf.len};
    PyObject *out = PyList_New(0);
    uint32_t f, g, h;
    int wt, gwt, hwt;
    Cur rs, ss, span;
    while (out != NULL && next_field(&c, &f, &wt)) {
        if (!(f == 1 && wt == WT_LEN)) {
            if (!skip(&c, f, wt)) goto malformed;
            continue;
        }
        if (!rd_len(&c, &rs)) goto malformed;
        while (next_field(&rs, &g, &gwt)) {
            if (!(g == 2 && gwt == WT_LEN)) {
                if (!skip(&rs, g, gwt)) goto malformed;
                continue;
            }
            if (!rd_len(&rs, &ss)) goto malformed;
            while (next_field(&ss, &h, &hwt)) {
                if (!(h == 2 && hwt == WT_LEN)) {
                    if (!skip(&ss, h, hwt)) goto malformed;
                    continue;
                }
                if (!rd_len(&ss, &span)) goto malformed;
                PyObject *b = PyBytes_FromStringAndSize((const char *)span.p, span.end - span.p);
                if (b == NULL || PyList_Append(out, b) < 0) {
                    Py_XDECREF(b);
                    Py_CLEAR(out);
                    break;
                }
                Py_DECREF(b);
            }
        }
    }
    PyBuffer_Release(&buf);
    return out;
malformed:
    PyBuffer_Release(&buf);
    Py_XDECREF(out);
    PyErr_SetString(PyExc_ValueError, "malformed request");
    return NULL;
}

/* ------------------------------------------------------------------------------------------------ */
/* Typed reads of attribute values (docs/mapping.md), for the mapper                                  */

enum { R_STRING = 0, R_TEXT = 1, R_COUNT = 2, R_AMOUNT = 3 };

/* How a value serves a typed read: 1 usable (*out set, new reference), 0 skipped silently (absent or
 * empty), -1 a wrong type (counted in mapping errors), -2 an error. */
static int typed(int op, PyObject *v, PyObject **out) {
    switch (op) {
    case R_STRING:
        if (PyUnicode_CheckExact(v)) {
            if (PyUnicode_GET_LENGTH(v) == 0) return 0;
            *out = Py_NewRef(v);
            return 1;
        }
        if (PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v))
            return (*out = PyObject_Str(v)) ? 1 : -2;
        return v == Py_None ? 0 : -1;
    case R_TEXT:
        if (PyUnicode_CheckExact(v) || PyList_CheckExact(v) || PyDict_CheckExact(v)) {
            *out = Py_NewRef(v);
            return 1;
        }
        if (v == Py_None) return (*out = PyUnicode_FromStringAndSize("", 0)) ? 1 : -2;
        if (PyBytes_CheckExact(v)) return -1;
        if (PyTuple_Check(v)) { /* Oversized(kind, raw): a bytes value is the wrong type */
            PyObject *kind = PyTuple_GET_SIZE(v) > 0 ? PyTuple_GET_ITEM(v, 0) : NULL;
            if (kind != NULL && PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "bytes") == 0)
                return -1;
            *out = Py_NewRef(v);
            return 1;
        }
        return (*out = PyObject_Str(v)) ? 1 : -2;
    case R_COUNT:
        if (PyLong_CheckExact(v)) {
            int overflow;
            long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (n == -1 && PyErr_Occurred()) return -2;
            if (overflow > 0 || (overflow == 0 && n >= 0)) {
                *out = Py_NewRef(v);
                return 1;
            }
        } else if (PyFloat_CheckExact(v)) {
            double x = PyFloat_AS_DOUBLE(v);
            if (isfinite(x) && x >= 0 && x == floor(x)) return (*out = PyLong_FromDouble(x)) ? 1 : -2;
        }
        return -1;
    case R_AMOUNT:
        if (PyFloat_CheckExact(v) || PyLong_CheckExact(v)) {
            double x = PyFloat_CheckExact(v) ? PyFloat_AS_DOUBLE(v) : PyLong_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) return -2;
            if (isfinite(x) && x >= 0) {
                *out = PyFloat_CheckExact(v) ? Py_NewRef(v) : PyFloat_FromDouble(x);
                return *out ? 1 : -2;
            }
        }
        return -1;
    }
    return 0;
}

/* A read over a dict of attributes: 1 found (*out set), 0 not found, -1 error. */
static int read_dict(PyObject *d, int op, PyObject *keys, PyObject *field, PyObject *errors, PyObject **out) {
    if (d == NULL || d == Py_None || PyDict_GET_SIZE(d) == 0) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *v = PyDict_GetItemWithError(d, PyTuple_GET_ITEM(keys, i));
        if (v == NULL) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        int t = typed(op, v, out);
        if (t == 1) return 1;
        if (t == -2 || (t == -1 && PyList_Append(errors, field) < 0)) return -1;
    }
    return 0;
}

/* One read: the first usable value of keys, span first then resource. Returns a new reference
 * (Py_None when nothing usable), NULL on error. Values of the wrong type append field to errors. */
static PyObject *read_one(PyObject *span, PyObject *res, int op, PyObject *keys, PyObject *field,
                          PyObject *errors) {
    PyObject *out = NULL;
    int found = read_dict(span, op, keys, field, errors, &out);
    if (found == 0) found = read_dict(res, op, keys, field, errors, &out);
    if (found < 0) return NULL;
    return found ? out : Py_NewRef(Py_None);
}

/* The plan of a kind over the current span's slots and its resource's attribute dict. */
static PyObject *run_plan(Scanner *sc, const KindPlan *plan, PyObject *rattrs) {
    PyObject *out = PyTuple_New(plan->nreads);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < plan->nreads; i++) {
        const PlanRead *pr = &plan->reads[i];
        PyObject *result = NULL;
        int found = 0;
        for (Py_ssize_t j = 0; j < pr->nkeys && !found; j++) {
            Slot *slot = slot_of(sc, pr->key_ids[j]);
            if (slot == NULL) continue;
            PyObject *v = attr_value(sc, slot->kv);
            if (v == NULL) goto error;
            int t = typed(pr->op, v, &result);
            Py_DECREF(v);
            if (t == 1) found = 1;
            else if (t == -2 || (t == -1 && PyList_Append(sc->errors, pr->field) < 0)) goto error;
        }
        if (!found && (found = read_dict(rattrs, pr->op, pr->keys, pr->field, sc->errors, &result)) < 0)
            goto error;
        PyTuple_SET_ITEM(out, i, found ? result : Py_NewRef(Py_None));
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

/* resolve(span, res, plan, errors) -> tuple: one result per (op, keys, field) of plan. */
static PyObject *resolve(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !(args[0] == Py_None || PyDict_Check(args[0])) ||
        !(args[1] == Py_None || PyDict_Check(args[1])) || !PyTuple_Check(args[2]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "resolve(span: dict, res: dict, plan: tuple, errors: list)");
        return NULL;
    }
    PyObject *plan = args[2];
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *read = PyTuple_GET_ITEM(plan, i);
        if (!PyTuple_Check(read) || PyTuple_GET_SIZE(read) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(read, 1))) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "plan items are (op, keys tuple, field)");
            return NULL;
        }
        int op = (int)PyLong_AsLong(PyTuple_GET_ITEM(read, 0));
        if (op == -1 && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *v = read_one(args[0], args[1], op, PyTuple_GET_ITEM(read, 1), PyTuple_GET_ITEM(read, 2), args[3]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"resolve", (PyCFunction)(void (*)(void))resolve, METH_FASTCALL,
     "resolve(span, res, plan, errors) -> tuple: typed reads of attribute values (see otelloop.mapping.reads)."},
    {"splice", splice, METH_VARARGS,
     "splice(data, extras) -> bytes: append extras[i] (bytes or None) to the i-th span."},
    {"span_bytes", span_bytes, METH_O, "span_bytes(data) -> list of each span's serialised bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otelloop._scan",
    "Native reader and splicer of OTLP trace requests (see otelloop.otlp.scan).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_schemas();
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    if (SpanInfoType.tp_name == NULL) {
        if (PyStructSequence_InitType2(&SpanInfoType, &span_info_desc) < 0) return NULL;
        /* Every field of a SpanInfo is set, so its members may say so: CPython then specialises reading
         * one by name like a __slots__ attribute (it does not for members that can be unset). */
        for (PyMemberDef *mb = SpanInfoType.tp_members; mb != NULL && mb->name != NULL; mb++) {
            if (mb->type == T_OBJECT) mb->type = T_OBJECT_EX;
        }
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddObjectRef(m, "SpanInfo", (PyObject *)&SpanInfoType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
