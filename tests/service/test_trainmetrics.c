/* tests/service/test_trainmetrics.c - the training metrics protocol
 * (src/exec/supervisor/trainmetrics.h): what the supervisor takes from a replica's
 * stdout as a report, and every line it must leave alone. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "exec/supervisor/trainmetrics.h"
#include "test.h"

static json_t *parse(const char *s)
{
    return kilnd_train_metrics_parse(s, strlen(s));
}

static double num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

int main(void)
{
    /* kiln-train's chief epoch line, as it prints it */
    json_t *o = parse("{\"event\":\"epoch\",\"epoch\":2,\"step\":938,\"loss\":0.412345,"
                      "\"accuracy\":0.851234,\"test_loss\":0.45,\"test_accuracy\":0.84,"
                      "\"samples_per_sec\":61234.5,\"seconds\":1.2}");
    CHECK(o != NULL);
    CHECK_STR(json_string_value(json_object_get(o, "event")), "epoch");
    CHECK(json_is_integer(json_object_get(o, "epoch")) && num(o, "epoch") == 2);
    CHECK(num(o, "step") == 938);
    CHECK(fabs(num(o, "loss") - 0.412345) < 1e-12);
    CHECK(fabs(num(o, "accuracy") - 0.851234) < 1e-12);
    CHECK(fabs(num(o, "testLoss") - 0.45) < 1e-12);
    CHECK(fabs(num(o, "testAccuracy") - 0.84) < 1e-12);
    CHECK(fabs(num(o, "samplesPerSecond") - 61234.5) < 1e-9);
    CHECK(json_object_get(o, "seconds") == NULL); /* not part of the protocol */
    json_decref(o);

    /* the done line: "steps" is the step */
    o = parse(
        "{\"event\":\"done\",\"test_accuracy\":0.86,\"samples_per_sec\":100.0,\"steps\":469}");
    CHECK(o && num(o, "step") == 469 && fabs(num(o, "testAccuracy") - 0.86) < 1e-12);
    json_decref(o);

    /* a length, not a NUL: the line may be cut out of a bigger buffer */
    const char *buf = "{\"event\":\"metrics\",\"loss\":1}{\"event\":\"metrics\",\"loss\":2}";
    o = kilnd_train_metrics_parse(buf, strlen(buf) / 2);
    CHECK(o && num(o, "loss") == 1);
    json_decref(o);

    /* a worker's view (rank > 0) is not the job's; rank 0 is */
    CHECK(parse("{\"event\":\"epoch\",\"loss\":0.5,\"rank\":1}") == NULL);
    o = parse("{\"event\":\"epoch\",\"loss\":0.5,\"rank\":0}");
    CHECK(o != NULL);
    json_decref(o);

    /* everything else stays a log line */
    const char *not_reports[] = {
        "",
        "epoch 1/5: loss 0.5 accuracy 0.8",                     /* text, not JSON */
        " {\"event\":\"epoch\",\"loss\":0.5}",                  /* must start the line */
        "{\"event\":\"epoch\",\"loss\":nan}",                   /* printf's nan is not JSON */
        "{\"event\":\"epoch\",\"loss\":0.5",                    /* cut short */
        "{\"event\":\"start\",\"batch_size\":128}",             /* another event */
        "{\"event\":\"epoch\"}",                                /* no numbers */
        "{\"event\":\"epoch\",\"loss\":\"0.5\"}",               /* a string is not a number */
        "{\"event\":7,\"loss\":0.5}",                           /* event not a string */
        "{\"loss\":0.5}",                                       /* no event */
        "[{\"event\":\"epoch\",\"loss\":0.5}]",                 /* not an object */
        "{\"event\":\"epoch\",\"event\":\"epoch\",\"loss\":1}", /* duplicate keys */
        "{\"event\":\"epoch\",\"loss\":0.5} trailing",          /* one object only */
    };
    for (size_t i = 0; i < sizeof not_reports / sizeof not_reports[0]; i++) {
        o = parse(not_reports[i]);
        CHECK_MSG(o == NULL, "taken as a report: %s", not_reports[i]);
        json_decref(o);
    }
    /* an overflowing number parses as infinity in some libraries: never exported */
    o = parse("{\"event\":\"epoch\",\"loss\":1e999,\"accuracy\":0.5}");
    CHECK(!o || (json_object_get(o, "loss") == NULL && num(o, "accuracy") == 0.5));
    json_decref(o);
    TEST_DONE();
}
