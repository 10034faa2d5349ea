// RUN-ARGS: --tp 2
// The same from the command line: the message names --tp, at the model.
import "wfvae.mm"
// expected-error@+1:7 {{--tp 2 splits nothing in M: no column/row-parallel pair}}
model M extends WFVAETiny {
}
