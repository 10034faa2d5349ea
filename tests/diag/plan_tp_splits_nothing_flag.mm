// RUN-ARGS: --tp 2
// The same from the command line: the message names --tp, at the model.
import "nn.mm"
// expected-error@+1:7 {{--tp 2 splits nothing in M: no column/row-parallel pair}}
model M {
  fc1 = Linear(8, 16)
  fc2 = Linear(16, 4)
  forward(x: f32[4, 8], y: f32[4, 4]) -> loss {
    return mse(fc2(softmax(fc1(x), axis = -1)), y)
  }
}
