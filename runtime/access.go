package runtime

import "github.com/stepwell/stepwell/queue"

// Queue returns the store the Runtime works on: the q given to New. Tools
// built on a Runtime (package ui) read the store's queues, dead letters and
// health through it; a program that opened q has it already.
func (rt *Runtime) Queue() *queue.Queue { return rt.q }

// QueueName returns the step queue the Runtime serves (WithQueueName).
func (rt *Runtime) QueueName() string { return rt.opts.queueName }
